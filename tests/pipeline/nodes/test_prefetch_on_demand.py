"""The output prefetch serves on demand while its consumer does next to nothing between calls
(iterators/prefetch.py, engine/overlap.py). Time is the ``thread_clock`` fixture (tests/conftest.py): fake
seconds of work per thread, however fast or loaded the machine is."""

import random
import threading

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options

N = 300


def pipeline(clock, made_on, n=N, cost=1.0, options=None):
    """range(n) -> map (records the thread that made each element, costs ``cost``) -> prefetch(AUTOTUNE)."""

    def make(x):
        made_on[int(x)] = threading.current_thread()
        clock.work(cost)
        return x

    ds = Dataset.range(n).map(make).prefetch(AUTOTUNE)
    return ds.with_options(options) if options is not None else ds


def consume(it, clock, away):
    """Every element, working ``away(i)`` seconds of fake time after element i."""
    out = []
    for i, x in enumerate(it):
        out.append(int(x))
        clock.work(away(i))
    return out


def on_consumer(made_on, indices):
    here = threading.current_thread()
    return [made_on[i] is here for i in indices]


def test_a_consumer_that_does_nothing_between_calls_gets_elements_read_on_its_own_thread(thread_clock):
    made_on = {}
    it = iter(pipeline(thread_clock, made_on))
    assert consume(it, thread_clock, away=lambda i: 0.0) == list(range(N))
    assert all(on_consumer(made_on, range(N - 100, N)))  # after a window or so, no thread hand-off
    assert it.root_iterator.executor_decision.startswith("on demand")


def test_a_consumer_that_works_between_calls_keeps_the_producer_thread(thread_clock):
    made_on = {}
    it = iter(pipeline(thread_clock, made_on))
    assert consume(it, thread_clock, away=lambda i: 1.0) == list(range(N))
    assert on_consumer(made_on, [0]) == [True]  # the first call is served here (time to first batch)
    assert not any(on_consumer(made_on, range(1, N)))
    assert it.root_iterator.executor_decision.startswith("thread")


def test_the_producer_thread_comes_back_when_the_consumer_starts_working(thread_clock):
    made_on = {}
    it = iter(pipeline(thread_clock, made_on, n=2 * N))
    assert consume(it, thread_clock, away=lambda i: 0.0 if i < N else 1.0) == list(range(2 * N))
    assert all(on_consumer(made_on, range(N - 100, N)))
    assert not any(on_consumer(made_on, range(2 * N - 100, 2 * N)))
    assert it.root_iterator.executor_decision.startswith("thread (back from on demand")


def test_autotune_off_keeps_the_thread(thread_clock):
    options = Options()
    options.autotune.enabled = False
    made_on = {}
    it = iter(pipeline(thread_clock, made_on, options=options))
    assert consume(it, thread_clock, away=lambda i: 0.0) == list(range(N))
    assert not any(on_consumer(made_on, range(1, N)))


def test_only_the_output_prefetch_is_judged(thread_clock):
    # an inner prefetch's consumer is the stage above it (here a map): left as it was
    made_on = {}

    def make(x):
        made_on[int(x)] = threading.current_thread()
        thread_clock.work(1.0)
        return x

    ds = Dataset.range(N).map(make).prefetch(AUTOTUNE).map(lambda x: x)
    assert consume(iter(ds), thread_clock, away=lambda i: 0.0) == list(range(N))
    assert not any(on_consumer(made_on, range(1, N)))


def test_order_errors_and_state_hold_while_the_mode_keeps_changing(flipping_judge, drain):
    # real threads and the real clock; the producer and the consumer race at every change of mode

    def bad_at_multiples_of_97(x):
        if x % 97 == 0 and x:
            raise ValueError(f"bad {int(x)}")
        return x

    unprefetched = Dataset.range(2000).map(bad_at_multiples_of_97).batch(3)
    ds = unprefetched.prefetch(AUTOTUNE)
    expected = drain(iter(unprefetched))
    assert sum(type(x) is str for x in expected) == 20
    for _ in range(3):
        assert drain(iter(ds)) == expected

    rng = random.Random(3)
    for _ in range(5):  # save at a random point while the mode keeps changing, restore into a fresh iterator
        it = iter(ds)
        head = drain(it, limit=rng.randrange(20, 600))
        state = it.get_state()
        rest = iter(ds)
        rest.set_state(state)
        tail = drain(rest, limit=40)
        assert head + tail == expected[:len(head) + len(tail)]
        it.close()
        rest.close()


def test_stats_name_where_the_output_prefetch_reads(thread_clock):
    options = Options()
    options.experimental_statistics = True
    made_on = {}
    it = iter(pipeline(thread_clock, made_on, options=options))
    consume(it, thread_clock, away=lambda i: 0.0)
    report = str(it.stats())
    assert "executor of Prefetch" in report and "on demand" in report


def test_python_exits_cleanly_with_a_parked_producer_left_open():
    import subprocess
    import sys

    script = (  # (on demand after one window and for good, however loaded the machine)
        "from jaxfeed.pipeline import AUTOTUNE, Dataset\n"
        "from jaxfeed.pipeline.engine import overlap\n"
        "overlap.TO_DEMAND = overlap.TO_THREAD = float('inf')\n"
        "it = iter(Dataset.range(10**8).map(lambda x: x + 1).batch(256).prefetch(AUTOTUNE))\n"
        "for _ in range(300): next(it)\n"
        "print(it.root_iterator.executor_decision, flush=True)\n"
    )
    try:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)  # a hang guard
    except subprocess.TimeoutExpired:
        raise AssertionError("still running after 120 s: hung at exit") from None
    out = p.stdout.decode() + p.stderr.decode()
    assert p.returncode == 0, out[-2000:]
    assert out.startswith("on demand"), out[-2000:]  # its producer was parked when Python exited
