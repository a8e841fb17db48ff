"""The engine never hands the user an internal object, never skips forever, never blocks at exit.

- A map result that is not an element (None, a set, a lock, a function, a generator, a bare object) is an
  error raised in the consumer at its position -- whatever the executor, through ``batch`` (fused or not)
  -- and ``ignore_errors`` skips exactly that element.
- An error that breaks the input as a whole (a process map's dead worker) ends ``ignore_errors``' iteration
  instead of being skipped again and again.
- An iterator freed while the interpreter finalizes (kept alive only by a reference cycle) never blocks
  the exit.
"""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, errors

from engine_test_helpers import map_workers

HANG_GUARD_SECONDS = 60  # generous: only a hang takes this long


# ------------------------------------------------------------------ results that are not elements
BAD_RESULTS = {
    "None": lambda: None,
    "set": lambda: {1, 2},
    "lock": threading.Lock,
    "function": lambda: (lambda: 0),
    "generator": lambda: (i for i in range(2)),
    "object": object,
}

EXECUTORS = {
    "sequential": {},
    "threads": {"num_parallel_calls": 2},
    "autotune": {"num_parallel_calls": AUTOTUNE},
    "process": {"num_parallel_calls": 2, "executor": "process"},
}


def returning(kind):
    make = BAD_RESULTS[kind]

    def fn(x):
        return make() if x == 3 else x

    return fn


def no_fusion():
    opts = Options()
    opts.experimental_optimization.map_and_batch_fusion = False
    return opts


def pipeline(kind, executor, shape):
    ds = Dataset.range(6).map(returning(kind), **EXECUTORS[executor])
    if shape == "batch":
        ds = ds.batch(2).with_options(no_fusion())
    elif shape == "fused":  # map(f).batch(b) runs as one MapAndBatch stage
        ds = ds.batch(2)
    return ds


def as_ints(out):
    return [np.asarray(x).tolist() for x in out]


def assert_is_the_maps_error(error):
    assert isinstance(error, (TypeError, ValueError))  # TF raises one of these
    assert "result of Map(" in str(error)
    assert any("Map(" in n and "input element 3" in n for n in getattr(error, "__notes__", []))


@pytest.mark.parametrize("shape", ["elements", "batch", "fused"])
@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("kind", list(BAD_RESULTS))
def test_a_result_that_is_not_an_element_raises_at_its_position(kind, executor, shape):
    if executor == "process" and shape == "fused":
        pytest.skip("process maps are not fused with batch (shape 'batch' covers them)")
    it = iter(pipeline(kind, executor, shape))
    if shape == "elements":
        assert as_ints(next(it) for _ in range(3)) == [0, 1, 2]
    else:
        assert as_ints([next(it)]) == [[0, 1]]
    with pytest.raises(Exception) as info:
        next(it)
    assert_is_the_maps_error(info.value)
    # it goes on after the error, as a sequential map does (a batch that met it is dropped with it)
    assert as_ints(it) == ([4, 5] if shape == "elements" else [[4, 5]])
    it.close()


@pytest.mark.parametrize("shape", ["elements", "batch", "fused"])
@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("kind", list(BAD_RESULTS))
def test_ignore_errors_skips_exactly_the_result_that_is_not_an_element(kind, executor, shape):
    if executor == "process" and shape == "fused":
        pytest.skip("process maps are not fused with batch (shape 'batch' covers them)")
    it = iter(pipeline(kind, executor, shape).ignore_errors())
    expected = [0, 1, 2, 4, 5] if shape == "elements" else [[0, 1], [4, 5]]
    assert as_ints(it) == expected
    assert len(it.skipped) == 1 and "result of Map(" in it.skipped[0]["error"]
    it.close()


def test_a_nested_result_that_is_not_an_element_raises_naming_its_position():
    ds = Dataset.range(4).map(lambda x: {"a": x, "b": None if x == 2 else x}, num_parallel_calls=2)
    it = iter(ds)
    assert [int(next(it)["a"]) for _ in range(2)] == [0, 1]
    with pytest.raises(ValueError, match="result of Map") as info:
        next(it)
    assert any("input element 2" in n for n in info.value.__notes__)


def lock_in_an_array(x):
    if x == 3:
        holder = np.empty((), object)
        holder[()] = threading.Lock()
        return holder
    return x


def test_a_process_map_result_that_cannot_be_sent_raises_instead_of_killing_the_worker():
    ds = Dataset.range(6).map(lock_in_an_array, num_parallel_calls=2, executor="process")
    it = iter(ds)
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(TypeError, match="input element 3 cannot be sent from the worker"):
        next(it)
    assert [int(x) for x in it] == [4, 5]
    assert [int(x) for x in ds.ignore_errors()] == [0, 1, 2, 4, 5]


# ------------------------------------------------------------------ errors that are not skipped
def exit_at_3(x):
    if x == 3:
        os._exit(3)
    return x


def consume_with_a_hang_guard(it):
    """Iterate ``it`` on a thread; (elements, the error raised), failing the test if it never ends."""
    got, raised = [], []

    def run():
        try:
            for x in it:
                got.append(x)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            raised.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_GUARD_SECONDS)
    assert not t.is_alive(), "the iteration never ended"
    return got, (raised[0] if raised else None)


def test_ignore_errors_ends_with_a_dead_worker_instead_of_skipping_it_forever():
    it = iter(Dataset.range(50).map(exit_at_3, num_parallel_calls=2, executor="process").ignore_errors())
    _, error = consume_with_a_hang_guard(it)
    assert isinstance(error, errors.WorkerDiedError) and "exit code 3" in str(error)
    assert it.skipped == []
    it.close()


def sleepy(x):
    import time

    time.sleep(0.02)
    return x



def test_ignore_errors_ends_with_a_worker_killed_from_outside():
    gc.collect()  # iterators of earlier tests kept by reference cycles stop their workers
    before = {p.pid for p in map_workers()}
    it = iter(Dataset.range(10_000).map(sleepy, num_parallel_calls=2, executor="process").ignore_errors())
    next(it)
    victim = next(p for p in map_workers() if p.pid not in before)
    victim.kill()
    _, error = consume_with_a_hang_guard(it)
    assert isinstance(error, errors.WorkerDiedError) and str(victim.pid) in str(error)
    it.close()


def raise_keyboard_interrupt_at_5(x):
    if x == 5:
        raise KeyboardInterrupt
    return x


def test_prefetch_raises_again_after_an_interrupt_instead_of_waiting_forever():
    it = iter(Dataset.range(100).map(raise_keyboard_interrupt_at_5).prefetch(4))
    for _ in range(2):
        _, error = consume_with_a_hang_guard(it)
        assert isinstance(error, KeyboardInterrupt)


# ------------------------------------------------------------------ exit
EXIT_PROGRAM = textwrap.dedent("""
    import itertools
    import sys
    from jaxfeed.pipeline import Dataset

    sys.setswitchinterval(1e-5)  # threads switch often: some are stopped inside the pool's locked sections

    def f(x):
        if x == 20:
            raise ValueError("boom")
        s = 0
        for i in range(3000):  # holds the GIL: the workers are busy when the interpreter exits
            s += i
        return x

    calls = itertools.count()

    def g(x):  # as f, failing at its 400th call (an interleave's readers run many inputs at once)
        if next(calls) == 400:
            raise ValueError("boom")
        return f(x + 1000)

    class Holder:
        pass

    def leave_in_a_cycle(ds):
        it = iter(ds)
        try:
            for _ in it:
                pass
        except ValueError as e:
            h = Holder()
            h.error, h.it = e, it  # e -> traceback -> this frame -> h -> e: only a cycle keeps `it` alive

    base = Dataset.range(10**6)
    kind = sys.argv[1]
    if kind == "map":
        leave_in_a_cycle(base.map(f, num_parallel_calls=8))
    elif kind == "autotune":
        leave_in_a_cycle(base.map(f, num_parallel_calls=-1))
    elif kind == "map_batch":
        leave_in_a_cycle(base.map(f, num_parallel_calls=8).batch(4))
    elif kind == "prefetch":
        leave_in_a_cycle(base.map(f, num_parallel_calls=8).prefetch(8))
    elif kind == "interleave":
        leave_in_a_cycle(base.interleave(lambda x: Dataset.range(50).map(g), cycle_length=8, num_parallel_calls=8))
""")


def test_an_iterator_freed_at_interpreter_exit_never_blocks_the_exit(tmp_path):
    # Before the fix about half of these runs hung (a worker thread stopped for good inside the pool's lock,
    # and the pool's shutdown waited for that lock). Runs go in parallel: the test costs about one run.
    program = tmp_path / "exit_with_a_cycle.py"
    program.write_text(EXIT_PROGRAM)
    runs = [subprocess.Popen([sys.executable, str(program), kind], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for kind in ("map", "autotune", "map_batch", "prefetch", "interleave") for _ in range(2)]
    hung = []
    for p in runs:
        try:
            out, err = p.communicate(timeout=HANG_GUARD_SECONDS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            hung.append(p.args[-1])
            continue
        assert p.returncode == 0, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
    assert not hung, f"runs hung at exit: {hung}"


# ------------------------------------------------------------------ input errors under the fused map+batch
def keep_but_17(x):
    if x == 17:
        raise ValueError("input error at 17")
    return True


def outcome(ds):
    """Everything iterating ``ds`` gives, an error as the string 'error: ...', in order."""
    it, out = iter(ds), []
    while True:
        try:
            out.append(np.asarray(next(it)).tolist())
        except StopIteration:
            return out
        except ValueError as e:
            out.append(f"error: {e}")


@pytest.mark.parametrize("npc", [None, 2, AUTOTUNE])
def test_the_fused_map_and_batch_raises_an_input_error_where_the_plain_graph_does(npc):
    # before: a parallel fused stage raised it while filling its batches in flight, ahead of the batches
    # before it; the elements of the batch it cut short are dropped (TF's batch), the next batch follows
    fused = Dataset.range(40).filter(keep_but_17).map(lambda x: x * 2, num_parallel_calls=npc).batch(4)
    plain = fused.with_options(no_fusion())
    before = [[2 * x for x in range(k, k + 4)] for k in range(0, 16, 4)]
    after = [[2 * x for x in range(k, min(k + 4, 40))] for k in range(18, 40, 4)]  # 16 went with the error
    expected = before + ["error: input error at 17"] + after
    assert outcome(plain) == expected
    assert outcome(fused) == expected
    assert as_ints(fused.ignore_errors()) == [b for b in expected if not isinstance(b, str)]


# ------------------------------------------------------------------ a closed iterator
@pytest.mark.parametrize("make", [
    lambda: Dataset.range(1000).prefetch(2),  # before: waited forever for its stopped producer
    lambda: Dataset.range(1000).map(lambda x: x, num_parallel_calls=2),  # before: went on past its lost blocks
    lambda: Dataset.range(1000).map(abs, num_parallel_calls=2, executor="process"),
], ids=["prefetch", "thread map", "process map"])
def test_a_closed_iterator_refuses_to_go_on(make):
    it = iter(make())
    assert [int(next(it)) for _ in range(2)] == [0, 1]
    it.close()
    got, error = consume_with_a_hang_guard(it)
    assert got == [] and isinstance(error, errors.FailedPreconditionError) and "closed" in str(error)
    with pytest.raises(errors.FailedPreconditionError):
        it.next_many(4)


_KILLED_CONSUMER_SCRIPT = """
import os, signal, sys, time
import numpy as np
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
from jaxfeed.pipeline.engine import remote_inner

def forever(i):  # a generator that comes to wait for ever (a socket, a file that never comes)
    yield from range(int(i) * 100, int(i) * 100 + 20)
    while True:
        time.sleep(0.05)

def stuck(x):
    while True:
        time.sleep(0.05)

o = Options()
o.autotune.cpu_budget = 2
slots = Dataset.range(2).interleave(
    lambda i: Dataset.from_generator(forever, args=(i,), output_signature=TensorSpec((), np.int64)),
    cycle_length=2, num_parallel_calls=AUTOTUNE).with_options(o)
remote_inner.shared_workers(2)
remote_inner.wait_started(60)
it = iter(slots)
next(it)  # (the workers read ahead until the generators wait)
mapped = iter(Dataset.range(4).map(stuck, num_parallel_calls=2, executor="process"))
import threading
import time
threading.Thread(target=lambda: next(mapped), daemon=True).start()
time.sleep(1.0)
import psutil
print(" ".join(str(p.pid) for p in psutil.Process().children(recursive=True)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_stuck_in_user_code_end_soon_after_their_consumer_is_killed(tmp_path):
    """A bug: a worker ends when it finds its pipe closed, but only between requests. One inside a function or
    generator that never returns outlived a consumer killed with SIGKILL (or by the OOM killer) for good. Each
    worker now watches its consumer (``processes.outlive_no_consumer``)."""
    import psutil

    script = tmp_path / "killed.py"
    script.write_text(_KILLED_CONSUMER_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_SECONDS,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # (killed: the forkserver's folder stays)
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) >= 4, (done.stdout, done.stderr[-2000:])  # the forkserver, its workers (map and slots)
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    for p in alive:  # (leave nothing behind either way)
        try:
            psutil.Process(p).kill()
        except psutil.Error:
            pass
    names = {p: " ".join(psutil.Process(p).cmdline())[:80] for p in alive if psutil.pid_exists(p)}
    assert not alive, names
