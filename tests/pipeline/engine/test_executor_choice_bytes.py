"""An element's trip to a worker process costs its bytes: what travels pickled is written into fresh memory
here and in the worker (``executor_choice.FRESH_WRITES``), a page fault per page; big arrays travel in
shared memory that is already mapped (``SLAB_BYTE_SECONDS``). The choice counts pickled bytes at a cost per
byte measured once per process, so big pickled elements whose call is cheap stay on threads where small ones
of the same cost -- or big arrays -- go to processes. Fake clocks and a faked cost per byte: no test depends
on the machine's speed."""

import dataclasses

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset
from jaxfeed.pipeline.engine import executor_choice
from jaxfeed.pipeline.engine.blocks import Failure
from jaxfeed.pipeline.engine.executor_choice import decide
from jaxfeed.pipeline.iterators import chosen_map
from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator
from jaxfeed.pipeline.iterators.process_map import ProcessMapIterator
from jaxfeed.pipeline.testing import assert_elements_equal

from test_executor_choice import HOLDS, as_list, gil_bound, measured, opts  # noqa: F401 - measured: a fixture

NS = 1e-9
KIB = 1024


def test_the_rule_counts_an_elements_bytes_at_the_cost_of_a_byte():
    """50 us calls, 10 us of pickling both ways: small elements promise 2 x 50 / (50 + 22) = 1.39x; with
    60 KiB written twice into fresh memory at 1 ns a byte the trip is 145 us: 0.51x."""
    small = dataclasses.replace(gil_bound(per_call=50e-6, transfer=10e-6), moved_bytes=300, byte_seconds=NS)
    big = dataclasses.replace(small, moved_bytes=60 * KIB)
    assert decide(small, cpus=2).executor == "process"
    d = decide(big, cpus=2)
    assert d.executor == "thread" and d.reason.startswith("too cheap to hand to processes: 50.00 us per call")
    assert "(60.0 KiB of element and result)" in d.reason
    assert big.trip == pytest.approx(executor_choice.TRIP_SECONDS + 2 * 10e-6 + 2 * 60 * KIB * NS)
    assert decide(dataclasses.replace(big, byte_seconds=0.0), cpus=2).executor == "process"  # free bytes


def test_the_warm_up_skips_the_probe_when_an_elements_bytes_cost_more_than_processes_save():
    assert executor_choice.cannot_pay(50e-6, 10e-6, cpus=2) is None
    d = executor_choice.cannot_pay(50e-6, 10e-6, cpus=2, moved_bytes=60 * KIB, byte_seconds=2 * NS)
    assert d.executor == "thread" and "KiB of element and result" in d.reason  # 100 / (50 + 268): 0.31x


def test_moved_bytes_counts_the_buffers_of_an_element_and_of_its_result():
    elements = [(np.int64(i), np.zeros((4, 4, 3), np.uint8)) for i in range(3)]  # 48 bytes of image each
    results = [{"image": np.zeros((4, 4, 3), np.float32), "text": "abcd", "raw": b"xy"} for _ in range(3)]
    assert executor_choice.moved_bytes(elements, results) == 48 + 192 + 4 + 2
    assert executor_choice.slab_bytes(elements, results) == 0  # small arrays are pickled
    assert executor_choice.moved_bytes([1, 2], [3, 4]) == 0  # Python numbers: a few bytes of pickle
    assert executor_choice.moved_bytes([b"abcd", b"ab"], [Failure(ValueError()), b"x"]) == 3 + 0.5
    assert executor_choice.moved_bytes([], []) == 0


def test_big_arrays_travel_in_shared_memory_and_are_counted_apart():
    """P4: a 12 KiB image (in a plain tuple) and a 48 KiB result go through the slabs; a big array inside an
    element the process map does not take apart (a namedtuple), and big bytes, are pickled."""
    import collections

    elements = [(np.int64(i), np.zeros((64, 64, 3), np.uint8)) for i in range(2)]
    results = [np.zeros((64, 64, 3), np.float32) for _ in range(2)]
    assert executor_choice.slab_bytes(elements, results) == 12288 + 49152
    assert executor_choice.moved_bytes(elements, results) == 0
    Pair = collections.namedtuple("Pair", "i image")
    elements = [Pair(np.int64(i), np.zeros((64, 64, 3), np.uint8)) for i in range(2)]
    results = [bytes(20000) for _ in range(2)]
    assert executor_choice.slab_bytes(elements, results) == 0
    assert executor_choice.moved_bytes(elements, results) == 12288 + 20000
    m = dataclasses.replace(gil_bound(per_call=50e-6, transfer=10e-6), slab_bytes=60 * KIB, byte_seconds=NS)
    assert m.trip == pytest.approx(executor_choice.TRIP_SECONDS + 2 * 10e-6
                                   + 60 * KIB * executor_choice.SLAB_BYTE_SECONDS)
    assert decide(m, cpus=2).executor == "process"


def test_the_pickling_timed_leaves_out_what_travels_in_shared_memory(monkeypatch):
    """``transfer_seconds`` pickles what goes through the pipe: a block of images costs as little as a
    block of their indices."""
    pickled = []
    real = executor_choice.pickle.dumps
    monkeypatch.setattr(executor_choice.pickle, "dumps", lambda obj, **kw: pickled.append(real(obj, **kw)) or pickled[-1])
    elements = [(np.int64(i), np.zeros((64, 64, 3), np.uint8)) for i in range(8)]
    results = [np.zeros((64, 64, 3), np.float32) for _ in range(8)]
    executor_choice.transfer_seconds(elements, results)
    assert pickled and max(len(p) for p in pickled) < 4096


def test_the_cost_of_a_byte_is_the_least_cpu_time_of_writes_into_fresh_memory():
    readings = iter([0, 9, 0, 4, 0, 6])  # three tries, each (start, end), in ms of CPU
    t = executor_choice.time_fresh_writes(4 * KIB, clock=lambda: next(readings) * 1e-3, tries=3)
    assert t == pytest.approx(4e-3 / (4 * KIB))


def big(x):
    """A cheap call with a big result (64 KiB) that travels pickled (bytes)."""
    return bytes(65536) + str(x).encode()


def big_array(x):
    """A cheap call with a big array result (64 KiB), like P4's image augmentation: it travels in shared
    memory."""
    return np.full(8192, float(x))


def small(x):
    return np.full(2, float(x))


@pytest.mark.parametrize("fn, executor", [(big, "thread"), (small, "process"), (big_array, "process")],
                         ids=["big", "small", "big-array"])
def test_with_a_costly_byte_big_elements_stay_on_threads_where_small_ones_go_to_processes(measured, monkeypatch,
                                                                                           fn, executor):
    """Same calls (the fake clocks make each 0.25-0.5 ms), same probe (holds the GIL), same free pickling:
    only the bytes differ. At 10 ns a byte (a machine whose page faults are slow) 64 KiB pickled and written
    twice cost 1.3 ms, far more than the call: threads, without a probe; 16 bytes cost nothing, and 64 KiB of
    array travel in shared memory (~13 us): processes."""
    probe = measured(HOLDS)
    monkeypatch.setattr(chosen_map._Chooser, "byte_seconds", staticmethod(lambda: 10 * NS))
    monkeypatch.setattr(executor_choice, "transfer_seconds", lambda elements, results, clock=None: 0.0)
    ds = Dataset.range(300).map(fn, num_parallel_calls=AUTOTUNE).with_options(opts())
    got, it = as_list(ds)
    assert it.executor_decision.executor == executor
    if executor == "thread":
        assert probe.calls == 0 and isinstance(it._inner, ParallelMapIterator)
        assert "64.0 KiB of element and result" in it.executor_decision.reason
    else:
        assert probe.calls == 1 and isinstance(it._inner, ProcessMapIterator)
    assert_elements_equal(got, [fn(i) for i in range(300)])
