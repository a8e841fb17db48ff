"""``map(executor="process")``: worker processes, shared-memory results, failures, clean-up."""

import gc
import os
import signal
import time

import numpy as np
import psutil
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, errors
from jaxfeed.pipeline.iterators import process_map
from jaxfeed.pipeline.engine import autotune, shared_memory
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

from engine_test_helpers import map_workers


@pytest.fixture(autouse=True)
def _collect_earlier_iterators():
    """Iterators kept alive by reference cycles (an exception's traceback) are released by the next
    collection; run it so each test sees only its own workers."""
    gc.collect()
    yield


def our_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"{shared_memory.PREFIX}{os.getpid()}_")}



def idle_pools_closed() -> bool:
    """Stop the workers an iterator that ran to its end kept for the next one (``process_map.open_pool``)."""
    from jaxfeed.pipeline.iterators import process_map

    process_map.close_idle_pools()
    return True


def pmap(ds, fn, workers=2, **kw):
    return ds.map(fn, num_parallel_calls=workers, executor="process", **kw)


def slow_first(x):
    time.sleep(0.02 if x % 7 == 0 else 0)
    return x * 2


def image(x):
    return {"img": np.full((32, 32, 3), x, np.float32), "label": x}


def fail_at_5(x):
    if x == 5:
        raise KeyError("five")
    return x


class Unpicklable(Exception):
    def __init__(self, lock):
        super().__init__("carries a lock")
        self.lock = lock


def raise_unpicklable(x):
    import threading

    if x == 2:
        raise Unpicklable(threading.Lock())
    return x


def die_at_3(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_process_map_keeps_input_order():
    assert [int(v) for v in pmap(Dataset.range(60), slow_first)] == [2 * i for i in range(60)]


def test_process_map_nondeterministic_yields_the_same_multiset():
    out = [int(v) for v in pmap(Dataset.range(60), slow_first, deterministic=False)]
    assert sorted(out) == [2 * i for i in range(60)]


def test_process_map_matches_sequential_map_for_big_nested_arrays():
    ds = Dataset.range(40)
    assert_elements_equal(list(pmap(ds, image)), list(ds.map(image)))
    assert idle_pools_closed() and our_segments() == set()


def test_process_map_function_error_keeps_its_type_and_position():
    it = iter(pmap(Dataset.range(8), fail_at_5))
    assert [int(next(it)) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(KeyError) as info:
        next(it)
    assert any("input element 5" in n for n in info.value.__notes__)
    assert [int(v) for v in it] == [6, 7]  # the iterator goes on after the error, like a sequential map


def test_process_map_unpicklable_error_becomes_runtime_error_naming_the_type():
    it = iter(pmap(Dataset.range(4), raise_unpicklable))
    assert [int(next(it)) for _ in range(2)] == [0, 1]
    with pytest.raises(RuntimeError, match="Unpicklable"):
        next(it)
    it.close()


def test_killed_worker_raises_worker_died_error_without_hanging():
    it = iter(pmap(Dataset.range(20), die_at_3))
    with pytest.raises(errors.WorkerDiedError, match=r"process \d+ died \(exit code -9\)"):
        list(it)
    it.close()
    assert map_workers() == [] and our_segments() == set()


def test_worker_killed_from_outside_raises_worker_died_error():
    def slow(x):
        time.sleep(0.05)
        return x

    it = iter(pmap(Dataset.range(1000), slow))
    next(it)
    victim = map_workers()[0]
    victim.kill()
    with pytest.raises(errors.WorkerDiedError, match=str(victim.pid)):
        for _ in it:
            pass
    it.close()


def test_close_leaves_no_worker_processes_and_no_shared_memory():
    it = iter(pmap(Dataset.range(500), image))
    next(it)
    assert len(map_workers()) == 2 and our_segments()
    it.close()
    assert map_workers() == [] and our_segments() == set()


def test_workers_of_an_epoch_run_to_its_end_serve_the_next_epoch():
    """An iterator that ran to its end leaves its workers, idle, to the next iterator of the same function (an
    epoch is often shorter than starting workers and faulting in their shared memory); ``close_idle_pools``
    -- also run at exit -- stops them and unlinks every slab."""
    ds = pmap(Dataset.range(500), image)
    got = list(ds)
    procs = map_workers()
    assert len(procs) == 2 and our_segments()
    assert_elements_equal(list(ds), got)
    assert map_workers() == procs  # the same processes
    assert idle_pools_closed()
    gone, alive = psutil.wait_procs(procs, timeout=30)  # a hang guard only: they exit at once
    assert alive == [] and map_workers() == [] and our_segments() == set()
    assert_elements_equal(got, [image(x) for x in range(500)])


def test_workers_are_not_kept_for_an_iterator_closed_with_tasks_in_flight_or_another_function():
    it = iter(pmap(Dataset.range(500), image))
    next(it)
    procs = map_workers()
    it.close()  # answers still due would reach the next iterator: the pool is closed
    psutil.wait_procs(procs, timeout=30)
    assert map_workers() == [] and our_segments() == set()
    list(pmap(Dataset.range(50), image))
    first = map_workers()
    list(pmap(Dataset.range(50), slow_first))  # another function: other workers (the first kept as well)
    assert len(map_workers()) == 4 and set(first) <= set(map_workers())


def test_kept_workers_are_not_reused_after_the_environment_or_working_directory_changed(tmp_path, monkeypatch):
    def env(x):
        return os.environ.get("JAXFEED_TEST_ENV", "") + os.getcwd() + str(x)

    ds = pmap(Dataset.range(4), env)
    assert [v.decode() for v in ds] == [os.getcwd() + str(i) for i in range(4)]
    monkeypatch.setenv("JAXFEED_TEST_ENV", "set:")
    assert [v.decode() for v in ds] == ["set:" + os.getcwd() + str(i) for i in range(4)]
    monkeypatch.chdir(tmp_path)
    assert [v.decode() for v in ds] == ["set:" + str(tmp_path) + str(i) for i in range(4)]


def test_kept_workers_run_the_function_as_it_is_now():
    """A function pickled by value carries the values it closes over: workers holding an older copy would run
    stale values, so a pool is reused only for the very same pickled function."""
    scale = [1]

    def scaled(x):
        return x * scale[0]

    assert [int(v) for v in pmap(Dataset.range(4), scaled)] == [0, 1, 2, 3]
    scale[0] = 10
    assert [int(v) for v in pmap(Dataset.range(4), scaled)] == [0, 10, 20, 30]


def test_garbage_collected_iterator_releases_its_workers():
    it = iter(pmap(Dataset.range(500), image))
    next(it)
    del it
    gc.collect()
    assert map_workers() == [] and our_segments() == set()


def test_process_map_resumes_with_blocks_in_flight():
    make = lambda: pmap(Dataset.range(12), image).map(lambda d: d["img"][0, 0, 0] + d["label"])  # noqa: E731
    assert_resumes_everywhere(make, ks=[0, 1, 5, 11, 12])
    assert idle_pools_closed() and map_workers() == [] and our_segments() == set()


def test_process_map_with_rng_matches_sequential_map():
    def noise(x, rng):
        return x + rng.integers(0, 1000)

    seq = Dataset.range(30).map(noise, with_rng=True, seed=7)
    par = pmap(Dataset.range(30), noise, with_rng=True, seed=7)
    assert_elements_equal(list(par), list(seq))


def test_options_execution_executor_selects_processes():
    opts = Options()
    opts.execution.executor = "process"
    opts.execution.num_workers = 1
    ds = Dataset.range(10).map(lambda x: np.int64(os.getpid()), num_parallel_calls=1).with_options(opts)
    pids = {int(p) for p in ds}
    assert os.getpid() not in pids and len(pids) == 1


def test_slabs_are_reused_not_created_per_result(monkeypatch):
    from jaxfeed.pipeline.iterators import process_map

    monkeypatch.setattr(process_map, "MAX_BLOCK", 8)  # answers of <= 8 images always fit the first slabs
    before = next(shared_memory._counter)
    it = iter(pmap(Dataset.range(2000), image))
    for _ in it:
        pass
    created = next(shared_memory._counter) - before - 1
    tasks = next(root(it)._ids)
    # per worker: DEPTH lent to tasks, and as many again while results handed out with their slab are read
    # (``SlabPool.hand_out``) -- a bound that does not grow with the tasks
    assert created <= 2 * 2 * process_map.DEPTH * 2 and tasks >= 250
    it.close()


def root(it):
    return it._it


@pytest.mark.timeout(120)
def test_big_inputs_and_big_results_do_not_deadlock_the_pipes():
    images = np.zeros((600, 64, 64, 3), np.uint8)  # tasks and answers both far larger than a pipe buffer
    out = pmap(Dataset.from_tensor_slices(images), lambda im: im.astype(np.float32)).batch(100)
    assert sum(len(b) for b in out) == 600


def test_unpicklable_function_is_a_type_error_naming_the_map():
    import threading

    lock = threading.Lock()
    it = iter(pmap(Dataset.range(3), lambda x: (lock, x)[1]))
    with pytest.raises(TypeError, match="executor='process' needs a function cloudpickle can serialise"):
        next(it)
    it.close()
    assert map_workers() == []


# ------------------------------------------------------------------ batch over stacked blocks
def tokens(x):
    return np.arange(4, dtype=np.int32) + np.int32(x), np.int64(x) * 3


def words(x):
    return b"w" * int(x % 5)


def ragged(x):
    return np.zeros(1 + (x >= 30), np.int32)


@pytest.mark.parametrize("size,drop", [(1, False), (7, False), (7, True), (64, False), (500, True), (500, False)])
def test_batch_over_process_map_equals_batch_over_a_plain_map(size, drop):
    # the batch is made of row slices of the workers' stacked blocks (joined across block boundaries), and
    # must be exactly the batch of the elements: values, dtypes, shapes, writable arrays
    ds = Dataset.range(301)
    for fn in (tokens, words, image):
        got = list(pmap(ds, fn).batch(size, drop_remainder=drop))
        want = list(ds.map(fn).batch(size, drop_remainder=drop))
        assert_elements_equal(got, want)
        for batch in got:
            leaves = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, tuple) else [batch]
            for leaf in leaves:
                assert leaf.flags.writeable
    assert idle_pools_closed() and our_segments() == set()


def test_batch_over_process_map_takes_row_slices_of_the_blocks():
    # small batches of a big block are views of it (no unstack and restack per row)
    batches = list(pmap(Dataset.range(200), tokens, workers=1).batch(4))
    assert sum(b[0].base is not None for b in batches) > len(batches) // 2


def test_batch_over_process_map_keeps_errors_and_ragged_elements_as_the_element_path_does():
    def outcomes(ds):
        it, out = iter(ds), []
        while True:
            try:
                out.append(next(it).tolist())
            except StopIteration:
                return out
            except KeyError:
                out.append("KeyError")

    ds = Dataset.range(12)
    got = outcomes(pmap(ds, fail_at_5).batch(4))
    assert got == outcomes(ds.map(fail_at_5).batch(4)) and got[:2] == [[0, 1, 2, 3], "KeyError"]
    assert [b.tolist() for b in pmap(ds, fail_at_5).ignore_errors().batch(4)] == \
        [b.tolist() for b in ds.map(fail_at_5).ignore_errors().batch(4)]
    with pytest.raises(errors.InvalidArgumentError):
        list(pmap(Dataset.range(40), ragged).batch(16))  # rows of two shapes meet in one batch


def test_batch_over_process_map_resumes_everywhere():
    make = lambda: pmap(Dataset.range(50), tokens).batch(6)  # noqa: E731
    assert_resumes_everywhere(make, ks=[0, 1, 3, 8, 9])
    assert idle_pools_closed() and map_workers() == [] and our_segments() == set()


def _process_map_of(it):
    """The ProcessMapIterator in a started DatasetIterator's tree."""
    todo = [it._it]
    while todo:
        node = todo.pop()
        if isinstance(node, process_map.ProcessMapIterator):
            return node
        todo.extend(node.children() + [getattr(node, "inner", None)] * hasattr(node, "inner"))
    raise AssertionError("no process map in the tree")


def autotuned(n, cpus=2, **opts):
    options = Options()
    options.autotune.cpu_budget = cpus
    for name, value in opts.items():
        setattr(options.execution if name == "num_workers" else options.autotune, name, value)
    return Dataset.range(n).map(slow_first, num_parallel_calls=AUTOTUNE, executor="process").with_options(options)


def test_autotune_starts_every_worker_and_gives_tasks_only_to_the_tuned_number(monkeypatch):
    """Under AUTOTUNE the workers start once, one per CPU of the budget, and the tuner decides how many get
    tasks: all at first; after a step down the worker left out gets no new task, and the elements are the
    plain map's whatever the value."""
    # a stopped clock: no tuning window ever ends, so only this test moves the knob (on the real clock a
    # probe down could begin within the first 40 elements on a slow or busy machine)
    monkeypatch.setattr(process_map.ProcessMapIterator, "clock", staticmethod(lambda: 0.0))
    it = iter(autotuned(600))
    got = [int(next(it)) for _ in range(40)]
    pm = _process_map_of(it)
    assert pm.workers == 2 and len(pm._pool.procs) == 2 and pm.parallelism == 2
    sent = []
    send = pm._pool.send
    pm._pool.send = lambda w, message: (sent.append(w), send(w, message))
    pm._tuner.value = pm._tuner.maximum = 1  # as a kept step down leaves it (and no step back up)
    got += [int(x) for x in it]
    assert got == [slow_first(x) for x in range(600)]
    assert sent and set(sent) == {0}
    assert pm.parallelism == 1 and len(pm._pool.procs) == 2  # no process stopped


def test_autotune_tells_the_tuner_every_delivery_and_the_consumers_waits(monkeypatch):
    made = []

    class Recording(autotune.Tuner):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.delivered, self.waits = 0, []
            made.append(self)

        def tick(self, delivered=0):
            self.delivered += delivered
            super().tick(delivered)

        def waited(self, seconds):
            self.waits.append(seconds)
            super().waited(seconds)

    monkeypatch.setattr(autotune, "Tuner", Recording)
    assert [int(x) for x in autotuned(300)] == [slow_first(x) for x in range(300)]
    assert len(made) == 1 and made[0].value <= 2 and made[0].maximum == 2
    assert made[0].delivered == 300 and made[0].waits and all(w >= 0 for w in made[0].waits)


@pytest.mark.parametrize("opts", [{"enabled": False}, {"num_workers": 2}])
def test_autotune_off_or_a_pinned_worker_count_gives_every_worker_tasks(opts):
    it = iter(autotuned(100, **opts))
    next(it)
    pm = _process_map_of(it)
    assert pm._tuner is None and pm.parallelism == pm.workers == 2
    assert [int(x) for x in it] == [slow_first(x) for x in range(1, 100)]


# ------------------------------------------------------------------------------------------- inside a worker
def holds_the_gil(x):
    return np.int64(sum(map(ord, str(int(x)) * 200)))


def _budget_of_two():
    o = Options()
    o.autotune.cpu_budget = 2
    return o


def autotuned_inside(k):
    """A map function that iterates a pipeline of its own, whose AUTOTUNE map would pick processes here."""
    o = _budget_of_two()
    o.experimental_statistics = True
    it = iter(Dataset.range(20000).map(holds_the_gil, num_parallel_calls=AUTOTUNE).with_options(o))
    total = sum(int(x) for x in it)
    report = str(it.stats())
    if "thread (this process is itself a worker process" not in report:
        raise AssertionError(report)
    return np.int64(total + int(k))


def explicit_inside(k):
    ds = Dataset.range(10).map(holds_the_gil, num_parallel_calls=2, executor="process")
    return np.int64(sum(int(x) for x in ds) + int(k))


def test_autotune_inside_a_worker_process_stays_on_threads():
    """A bug: a map function that iterated a pipeline of its own, in a process map's worker, crashed with
    multiprocessing's "daemonic processes are not allowed to have children" when that pipeline's AUTOTUNE
    map chose processes. A worker process cannot start processes: AUTOTUNE keeps threads there, and says so."""
    want = sum(int(holds_the_gil(x)) for x in range(20000))
    got = [int(x) for x in pmap(Dataset.range(2), autotuned_inside)]
    assert got == [want, want + 1]


def test_an_explicit_process_map_inside_a_worker_process_says_why_it_cannot_start():
    with pytest.raises(errors.InvalidArgumentError, match="itself a worker process.*executor='thread'"):
        list(pmap(Dataset.range(2), explicit_inside))


def environment_seen(x):
    return np.int64(len(os.environ.get("JAXFEED_TEST_SEEN", "")))


def test_map_workers_see_the_environment_of_now_not_of_the_first_start(monkeypatch):
    """A bug: forkserver workers inherit the environment the server started with (the process's first worker
    start), so a map function read a variable the user set since as it was then. Each start passes it on."""
    ds = pmap(Dataset.range(2), environment_seen)
    monkeypatch.delenv("JAXFEED_TEST_SEEN", raising=False)
    assert [int(x) for x in ds] == [0, 0]
    monkeypatch.setenv("JAXFEED_TEST_SEEN", "abc")
    assert [int(x) for x in ds] == [3, 3]


def global_draw(x):
    return np.int64(np.random.randint(1 << 40))


def test_workers_draw_from_numpy_global_random_state_of_their_own():
    """A bug (the DataLoader's classic): each worker is a fork of the forkserver and started numpy's global
    random state where the server had it -- two workers drew the same numbers, and every epoch's new workers
    drew them again. Workers now reseed it from the OS, as Python's random does after a fork."""
    ds = pmap(Dataset.range(2000), global_draw)
    first = [int(x) for x in ds]
    second = [int(x) for x in ds]
    assert len(set(first)) == len(first)
    assert not set(first) & set(second)


def _edit_and_reload(tmp_path, monkeypatch, name, before, after, caller=None):
    """Run ``f`` of a module written with ``before``, then of the same module rewritten with ``after`` and
    reloaded: the values of both runs. With ``caller``, ``f`` is that module's (another, unchanged one that
    calls into the edited module)."""
    import importlib

    module = tmp_path / f"{name}.py"
    module.write_text(before)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module(name)
    if caller is not None:
        (tmp_path / f"{name}_caller.py").write_text(caller)
    f = importlib.import_module(f"{name}_caller").f if caller is not None else probe.f
    first = [int(v) for v in pmap(Dataset.range(4), f)]
    module.write_text(after)
    importlib.reload(probe)
    f = f if caller is not None else probe.f
    return first, [int(v) for v in pmap(Dataset.range(4), f)]


def test_kept_workers_are_not_reused_once_the_functions_module_was_edited_and_reloaded(tmp_path, monkeypatch):
    """A module's function is pickled by reference (the same bytes after an edit): workers that imported the
    old module would run the old code (a notebook's autoreload) -- of the function, or of a helper."""
    assert _edit_and_reload(tmp_path, monkeypatch, "jaxfeed_reload_probe", "def f(x):\n    return x + 1\n",
                            "def f(x):\n    return x + 1000  # edited\n") == ([1, 2, 3, 4], [1000, 1001, 1002, 1003])
    helper = "def helper(x):\n    return x + {}\n\n\ndef f(x):\n    return helper(x)\n"
    assert _edit_and_reload(tmp_path, monkeypatch, "jaxfeed_reload_helper", helper.format(1),
                            helper.format("1000  # edited")) == ([1, 2, 3, 4], [1000, 1001, 1002, 1003])


def test_kept_workers_are_not_reused_once_a_module_the_function_calls_into_was_edited_and_reloaded(
        tmp_path, monkeypatch):
    """``other.helper(x)`` from an unchanged module: after ``importlib.reload(other)`` the consumer's threads
    run the new helper; workers kept from before ran the old one."""
    helper = "def helper(x):\n    return x + {}\n"
    caller = "import jaxfeed_reload_other as other\n\n\ndef f(x):\n    return other.helper(x)\n"
    assert _edit_and_reload(tmp_path, monkeypatch, "jaxfeed_reload_other", helper.format(1),
                            helper.format("1000  # edited"), caller) == ([1, 2, 3, 4], [1000, 1001, 1002, 1003])
