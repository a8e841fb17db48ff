"""AUTOTUNE's choice of executor for a parallel map: threads, or worker processes when its function holds
the GIL and the work pays for moving elements between processes.

Which maps choose: ``num_parallel_calls=AUTOTUNE`` with no executor given (``map(..., executor=None)`` and
``Options.execution.executor`` unset), AUTOTUNE on, at least two CPUs in the budget, not ``stateful=True``
(its state lives in this process), not vectorized (one call per batch: numpy releases the GIL), a function
whose move nobody would notice (``worker_safety``: a plain function that assigns no global and reaches no
list, dict, array or object -- appending to a global list in a worker would append to a copy; the user's
process never saw what a map moved there appended), not in a worker process itself (``processes.worker_reason``)
and a stage of the iterated graph (a map built inside an interleave's function would start a pool of processes
per input). Every other AUTOTUNE map runs on threads, with the reason recorded (``static_reason``).

How (``iterators/chosen_map.py``): before any element is delivered, the map's first input elements are
mapped on the consumer's thread (a warm-up that estimates the CPU time per call: on a shared machine the
wall time of a call grows whenever the thread is descheduled, its CPU time does not), then a short probe
maps the next ones on two threads at once, timing each thread's CPU (``time.thread_time``), the wall time
of the whole and the CPU the process's other threads used meanwhile. A function that holds the GIL keeps one
core busy however many threads call it: CPU / wall stays near 1 on 2 threads; one that releases it (numpy,
I/O in C) reaches 2; one that waits (sleep, network) stays near 0. The probe's results are the map's
results: every element is mapped once, in order, and delivered first, whichever executor then runs the
rest (its input continues after the probe's elements).

An element's trip to a worker and back is judged by what it costs on this machine: a fixed part, the pickling
of a sample of elements and results (``transfer_seconds``: what goes through the pipe -- the big arrays that
travel in shared memory left out), the bytes that travel pickled written into fresh memory, once in this
process and once in the worker (``moved_bytes`` x ``FRESH_WRITES`` x ``fresh_byte_seconds``, the last measured
once per process: a first write to a page costs a page fault), and the big arrays copied once into a reused,
already mapped slab (``slab_bytes`` x ``SLAB_BYTE_SECONDS``). On this loaded virtual machine (~0.8-1 ns a fresh
byte) P4's 12 KB images and 48 KB results cost the consumer 75-90 us of CPU a trip when they were pickled;
through the slabs (inputs stacked into one, results handed out viewing theirs) ~10.

The cores the pipeline's other threads keep busy (measured in the warm-up and the probe; at least
``UPSTREAM_CORES`` when a parallel stage upstream runs on threads) are not the workers' to use: the gain
processes promise is judged on the cores left.

A probe in which two threads got much less CPU than one did says nothing about the GIL: something else had
the cores. When that something is this pipeline's other stages (P3's interleave readers), processes would
have to share the cores with them: threads. When it is another program (a shared machine), it is usually
a passing slice of time: the probe runs again, up to ``MAX_PROBES`` times, and a decision still left
open by then (threads) is not remembered, so the next iterator probes afresh.

The decision is then fixed for the iterator's lifetime, kept in its state (a restored iterator runs on the
executor it was saved from) and remembered by the ``Dataset`` for its next iterators (no probe again).

The rule (``decide``) is a pure function of the measurement, tested directly; the clocks and the probe are
attributes of the iterator, which tests replace, so no test depends on the machine's speed.
"""

from __future__ import annotations

import mmap
import pickle
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import autotune
from .processes import worker_reason
from .worker_safety import safety_reason

WARM_SECONDS = 0.0002  # the warm-up on the consumer's thread: long enough for a time-per-call estimate
MAX_WARM = 255  # elements in the warm-up at most (1 + 2 + ... + 128: doubling chunks; the last one is judged,
# so the first call's one-off costs are not)
SLOW_CALL = 0.01  # a first call this slow is judged alone: a few such calls dwarf the probe's thread start-up
PROBE_SECONDS = 0.001  # the two-thread probe's length: thread start-up (~0.1 ms) is a small part of it, and
# the first batch (made of the probe's results) is not much later than without a probe
MAX_PROBE = 4096  # elements in the probe at most
TRIP_SECONDS = 2e-6  # CPU an element's trip to a worker process and back costs beyond its call, small
# elements (P5's lines: 1.5 us on the consumer -- pickling the block, receiving, joining the batch -- and
# ~1 us in the worker; measured with psutil on 2 cores): processes only pay for calls well above it
TRANSFER_FACTOR = 2  # ...plus this many times the measured pickling both ways (big elements are copied
# through the pipe or the slab as well as pickled)
FRESH_WRITES = 2  # times each byte that travels pickled (strings, bytes, small arrays) is written into fresh
# memory on its trip: once here (the task's block pickled into a new buffer) and once in the worker (received)
SLAB_BYTE_SECONDS = 0.2e-9  # a byte of a big array copied into a slab already mapped (5 GB/s; P4's results were
# copied out of a slab at 5.4 GB/s here): an input column stacked into the task's slab, a result stacked into
# its slab by the worker (``shared_memory``); the consumer reads results where they lie (``SlabPool.hand_out``)
FRESH_SAMPLE = 1 << 18  # bytes written into fresh memory to time it (64 pages of 4 KiB: ~0.3 ms at 1 ns a byte)
MIN_GAIN = 1.1  # the speed-up processes must promise over one core: (calls x CPUs) / (calls + trips), the
# calls timed on one thread (the warm-up): an 8 us tokeniser promises 1.13-1.21x on 2 CPUs and ran 1.17x
# faster in processes than on threads; P3's 3-4 us parse promises 0.5-0.85x and stays on threads
GIL_CORES = 1.4  # ``Measurement.scaling`` above which the function runs in parallel on threads (1.0 when
# it holds the GIL, plus some of the thread start-up; 2.0 when it releases it, on a machine with 2 cores free)
DISTURBED = 0.6  # ``Measurement.scaling`` below which two threads got much less CPU than one did: not the GIL
# (that gives ~1.0) but other threads -- the pipeline's own readers, other programs -- taking the cores
OWN_CORES = 0.3  # ...the pipeline's own when its other threads used this many cores during the probe
# (``Measurement.others``): worker processes would have to share the cores with them for good
UPSTREAM_CORES = 1.0  # cores a parallel stage upstream of the map (``upstream_threads``) is taken to keep
# busy in this process, whatever the warm-up saw: its threads read in bursts (P3's interleave readers kept
# 0.3-0.8 cores busy in 9 warm-ups of 10 and none in the 10th, whose probe then chose processes). P3's parse
# in processes measured 9.1 us of CPU a record against 4.8 on threads (its consumer alone 3.6: reading,
# shipping), 2.5x slower; processes pay there only for a function far costlier than its trip
MAX_PROBES = 3  # probes at most while other programs disturb them (each ~2 ms, its results kept): on the
# shared 2-core machine (load 4-5) 7 and 14 of ~20 probes of P5 lost the cores for a few ms; three probes
# decided 19 iterators of 20 (the 20th stayed on threads, and the next iterator probes again)
BUSY_CORES = 0.5  # CPU/wall on one thread below which the calls mostly wait (sleep, I/O): threads overlap
# waits as well as processes do
START_SECONDS = 0.1  # starting worker processes (a forkserver fork and imports: 30-100 ms, more the first
START_FACTOR = 2  # time) -- the work left must be this many times it: processes save at most half of it


@dataclass(frozen=True)
class Measurement:
    """What the probe saw: ``calls`` calls on ``threads`` threads took ``wall`` seconds and ``cpu`` seconds of
    the threads' CPU time (summed); moving an element and its result to a worker and back cost ``transfer``
    seconds per element (pickling both ways, measured on a sample)."""

    calls: int
    threads: int
    wall: float
    cpu: float
    transfer: float
    solo_per_call: float = 0.0  # CPU seconds per call of the warm-up's calls on one thread (0: unknown)
    solo: float = 1.0  # CPU / wall of the warm-up's calls on one thread (below 1: they waited, or the
    # machine is busy -- a loaded machine lowers both measures alike, so their ratio is what is judged)
    others: float = 0.0  # CPU seconds the process's other threads used during the probe (its readers...)
    warm_own: float = 0.0  # cores the process's other threads kept busy during the warm-up
    moved_bytes: float = 0.0  # bytes of an element and of its result that travel pickled (``moved_bytes``):
    byte_seconds: float = 0.0  # written into fresh memory on their trip (``trip_seconds``), CPU seconds a byte
    slab_bytes: float = 0.0  # ...and those that travel in shared memory (``slab_bytes``)

    @property
    def cores(self) -> float:
        """CPU / wall: how many cores the calls kept busy."""
        return self.cpu / self.wall if self.wall > 0 else 0.0

    @property
    def scaling(self) -> float:
        """How many times the cores one thread keeps busy the two threads kept busy: ~1 when the function
        holds the GIL, ~2 when it releases it."""
        return self.cores / self.solo if self.solo > 0 else 0.0

    @property
    def per_call(self) -> float:
        """CPU seconds per call (time waiting for the GIL is not CPU time)."""
        return self.cpu / self.calls if self.calls else 0.0

    @property
    def trip(self) -> float:
        """CPU seconds an element's trip to a worker and back costs beyond its call (``trip_seconds``)."""
        return trip_seconds(self.transfer, self.moved_bytes, self.byte_seconds, self.slab_bytes)

    @property
    def own(self) -> float:
        """Cores the pipeline's other threads kept busy, the more of the warm-up's and the probe's."""
        return max(self.warm_own, self.others / self.wall if self.wall > 0 else 0.0)


@dataclass(frozen=True)
class Decision:
    """``executor`` is "thread" or "process"; ``reason`` says why, in words (statistics, ``explain``).
    ``final`` is False for a decision the measurement left open (a probe disturbed by other programs): the
    iterator may probe again, and the ``Dataset`` does not remember it."""

    executor: str
    reason: str
    final: bool = True

    def __str__(self):
        return f"{self.executor} ({self.reason})"


def decide(m: Measurement, cpus: int, remaining: int | None = None) -> Decision:
    """The executor for a map whose probe measured ``m``, with ``cpus`` CPUs in the budget and ``remaining``
    input elements after the probe (None: unknown or infinite)."""
    if cpus < 2:
        return Decision("thread", f"{cpus} CPU in the budget: processes cannot run side by side")
    if m.solo < BUSY_CORES:
        return Decision("thread", f"function mostly waits: cpu/wall {m.solo:.2f} on 1 thread")
    ratio = f"cpu/wall {m.cores:.2f} on {m.threads} threads, {m.solo:.2f} on 1"
    if m.scaling >= GIL_CORES:
        return Decision("thread", f"function releases the GIL: {ratio}")
    trip = m.trip
    # a call's cost: the least CPU per call seen, the warm-up's (one thread) or the probe's. Contention only
    # ever adds CPU: on two threads a function that holds the GIL burns CPU handing the GIL over, and cold
    # caches or the pipeline's own threads made P3's 3 us parse cost 20-30 us a call in some warm-ups
    per_call = min(m.solo_per_call, m.per_call) if m.solo_per_call else m.per_call
    own = m.own
    gain = per_call * max(0.0, cpus - own) / (per_call + trip)
    if gain < MIN_GAIN:
        return Decision("thread", f"too cheap to hand to processes: {_us(per_call)} per call, "
                                  f"~{_us(trip)} to move an element there and back"
                                  f"{_bytes(m.moved_bytes, m.slab_bytes)} ({gain:.2f}x on {cpus} CPUs at best"
                                  f"{_less(own)})")
    if m.scaling < DISTURBED:  # (judged after the gain: a call too cheap for processes needs no new probe)
        if own >= OWN_CORES:
            return Decision("thread", f"probe disturbed (two threads got less CPU than one: {ratio}) by this "
                                      f"pipeline's other threads ({own:.2f} cores): processes would share "
                                      "the cores with them")
        return Decision("thread", f"probe disturbed (two threads got less CPU than one: {ratio}) by other "
                                  f"programs ({own:.2f} cores for this pipeline's other threads)", final=False)
    if remaining is not None and remaining * m.per_call < START_FACTOR * START_SECONDS:
        return Decision("thread", f"too little work left to start processes: {remaining} elements x "
                                  f"{_us(m.per_call)}")
    return Decision("process", f"function holds the GIL: {ratio}")


def too_cheap(per_call: float) -> Decision | None:
    """The decision after the warm-up alone, when its calls are far too cheap for processes to pay: no
    two-thread probe needed (it would only cost time)."""
    if per_call < TRIP_SECONDS / 2:
        return Decision("thread", f"too cheap to hand to processes: {_us(per_call)} per call")
    return None


NO_HOPE_GAIN = 1.0  # (cannot_pay) below this, processes would not even match one core: the probe is skipped
# (between it and MIN_GAIN the probe still runs: it also finds functions that release the GIL or wait).


def cannot_pay(per_call: float, transfer: float, cpus: int, own: float = 0.0, moved_bytes: float = 0.0,
               byte_seconds: float = 0.0, slab_bytes: float = 0.0) -> Decision | None:
    """The decision after the warm-up alone when processes cannot pay even for a function that holds the GIL
    all the time: ``cpus`` workers at ``per_call`` (the warm-up's CPU seconds per call) each against an
    element's trip there and back, less the ``own`` cores the pipeline's other threads kept busy meanwhile
    (P3's interleave readers: the workers would share the cores with them). No two-thread probe then: it
    would only delay the first batch (the probe's elements wait for the input one chunk after another,
    where threads would overlap them). ``transfer``, ``moved_bytes``, ``byte_seconds``, ``slab_bytes``: see
    ``trip_seconds``."""
    if cpus < 2:
        return Decision("thread", f"{cpus} CPU in the budget: processes cannot run side by side")
    trip = trip_seconds(transfer, moved_bytes, byte_seconds, slab_bytes)
    gain = per_call * max(0.0, cpus - own) / (per_call + trip)
    if gain < NO_HOPE_GAIN:
        return Decision("thread", f"too cheap to hand to processes: {_us(per_call)} per call, "
                                  f"~{_us(trip)} to move an element there and back{_bytes(moved_bytes, slab_bytes)} "
                                  f"({gain:.2f}x on {cpus} CPUs at best{_less(own)})")
    return None


def trip_seconds(transfer: float, moved_bytes: float = 0.0, byte_seconds: float = 0.0,
                 slab_bytes: float = 0.0) -> float:
    """CPU seconds an element's trip to a worker and back costs beyond its call, consumer and worker
    together: a fixed part (``TRIP_SECONDS``), ``TRANSFER_FACTOR`` times its measured pickling both ways
    (``transfer``), its ``moved_bytes`` (element and result, pickled) written ``FRESH_WRITES`` times into fresh
    memory at ``byte_seconds`` a byte, each page faulted in on its first write, and its ``slab_bytes`` (big
    arrays) copied once into a warm slab (``SLAB_BYTE_SECONDS``)."""
    return (TRIP_SECONDS + TRANSFER_FACTOR * transfer + FRESH_WRITES * moved_bytes * byte_seconds
            + slab_bytes * SLAB_BYTE_SECONDS)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def _bytes(moved: float, slab: float = 0.0) -> str:
    parts = [f"{moved / 1024:.1f} KiB of element and result" if moved >= 1024 else "",
             f"{slab / 1024:.1f} KiB in shared memory" if slab >= 1024 else ""]
    said = ", ".join(p for p in parts if p)
    return f" ({said})" if said else ""


def _less(own: float) -> str:
    return f", less {own:.2f} cores for this pipeline's other threads" if own >= 0.005 else ""


# ---------------------------------------------------------------------------------------- which maps
def chooses(map_node, options) -> bool:
    """Whether AUTOTUNE chooses ``map_node``'s executor: AUTOTUNE parallelism and no executor given."""
    npc = map_node.num_parallel_calls
    return (npc is not None and npc < 0 and map_node.executor is None
            and options.execution.executor is None)


def static_reason(map_node, ctx, node=None, vectorized=False) -> str | None:
    """Why a map that ``chooses`` its executor stays on threads without a probe, or None when a probe decides.
    ``node`` is the stage in the iterated graph (the map, or the fused map+batch holding it)."""
    if not autotune.enabled(ctx.options):
        return "AUTOTUNE is off (Options.autotune.enabled=False)"
    if map_node.stateful:
        return "stateful=True: its state lives in this process"
    if vectorized:
        return "vectorized: one call per batch"
    if ctx.cpu_count < 2:
        return f"{ctx.cpu_count} CPU in the budget: processes cannot run side by side"
    why = worker_reason()
    if why is not None:
        return why
    slot = autotune.learned_slot(ctx, node if node is not None else map_node)
    if slot is None:
        return "built inside another transformation's function (a probe per inner dataset would not pay)"
    # (the explicit executor="process" is the user's to choose.) Judged once per Dataset, like the probe: the
    # bytecode walk takes 0.2-0.6 ms, on the first batch's path of every epoch (P3 as ported's first batch
    # went from 1.15-1.19x the hand loop's to 1.4-1.8x)
    store, key = slot[0], slot[1] + ("safety",)
    if key not in store:
        store[key] = safety_reason(map_node.map_func, "function")
    unsafe = store[key]
    if unsafe is not None:
        return f"{unsafe}: what it changes would change in a worker's copy only"
    return None


def interleave_reason(node, ctx) -> str | None:
    """Why a parallel interleave with ``num_parallel_calls=AUTOTUNE`` keeps every slot in this process, or None
    when its slots may open in worker processes (``engine/remote_inner.py``; each slot's inner dataset is then
    judged as it opens: ``from_generator`` sources go)."""
    if not autotune.enabled(ctx.options):
        return "AUTOTUNE is off (Options.autotune.enabled=False)"
    if ctx.options.execution.executor == "thread":
        return "Options.execution.executor='thread'"
    if ctx.cpu_count < 2:
        return f"{ctx.cpu_count} CPU in the budget: processes cannot run side by side"
    why = worker_reason()
    if why is not None:
        return why
    if autotune.learned_slot(ctx, node) is None:
        return "built inside another transformation's function (workers per inner dataset would not pay)"
    return None


def upstream_threads(map_node) -> bool:
    """Whether a stage upstream of ``map_node`` runs on threads of this process (a parallel interleave or
    map, a prefetch): its work stays here, beside the workers, if the map goes to processes."""
    from .. import graph

    return any(n.num_parallel_calls is not None or n.runs_ahead() for n in graph.walk(map_node.inputs[0]))


def picklable_reason(fn) -> str | None:
    """Why ``fn`` cannot go to worker processes (cloudpickle fails on it), or None when it can."""
    import cloudpickle

    try:
        cloudpickle.dumps(fn)
    except Exception as e:  # noqa: BLE001 - any failure means: not to processes
        return f"function cannot be pickled for worker processes ({type(e).__name__}: {e})"
    return None


# --------------------------------------------------------------------------------------------- probe
def probe(run, elements: list, position: int, solo: float, clock=time.perf_counter, cpu_clock=time.thread_time,
          process_clock=time.process_time):
    """Map ``elements`` (input positions ``position``...) on two threads at once -- the caller's and one
    more -- with ``run(block, position) -> (results, failed)``; returns ``(results in order, Measurement)``.

    Each thread times its own CPU with ``cpu_clock``; the wall time runs from the moment both threads are
    ready to the end of the later one; ``process_clock`` (all the process's threads) less the two threads'
    CPU is what the process's other threads used meanwhile. ``solo`` is the warm-up's CPU / wall on one
    thread."""
    half = (len(elements) + 1) // 2
    parts = [(elements[:half], position), (elements[half:], position + half)]
    out, cpu, start, end = [None, None], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    process = [0.0, 0.0, 0.0, 0.0]  # the process's CPU as each thread started and ended
    raised = []
    ready = threading.Barrier(2)

    def work(i):
        try:
            ready.wait()
            start[i], process[i], c0 = clock(), process_clock(), cpu_clock()
            out[i] = run(*parts[i])
            cpu[i], process[2 + i], end[i] = cpu_clock() - c0, process_clock(), clock()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            raised.append(e)
            ready.abort()

    helper = threading.Thread(target=work, args=(1,), name="jaxfeed-probe", daemon=True)
    helper.start()
    work(0)
    helper.join()
    if raised:
        raise raised[0]
    results = list(out[0][0]) + list(out[1][0])
    wall = max(end) - min(start)
    # from the first thread's start to the last one's end: not the helper's start-up (~0.5 ms of CPU)
    others = max(0.0, max(process[2:]) - min(process[:2]) - cpu[0] - cpu[1])
    m = Measurement(len(elements), 2, wall, cpu[0] + cpu[1], transfer_seconds(elements, results, cpu_clock),
                    solo, others=others)
    return results, m


SAMPLE = 64  # elements whose trip to a worker is timed


def transfer_seconds(elements: list, results: list, clock=time.thread_time) -> float:
    """Seconds each further element adds to pickling a block of ``elements`` and of their results
    (stacked, as workers send them) and unpickling both: the consumer's share of an element's trip to a
    worker process. Infinite when they cannot be pickled (they cannot go to a worker at all).

    The cost of a block of one is taken off: a block's fixed cost (pickling a numpy array costs ~5 us
    whatever its size) is shared by the hundreds of elements of a worker's task, not by the few of the
    sample (the warm-up's last chunk: 8 or 16 of P5's lines, as the machine's speed had it, measured 5
    and 1 us a line). Timed in CPU time by default: being descheduled adds only wall time."""
    from .. import structure
    from .blocks import Failure

    inputs = elements[:SAMPLE]
    outputs = [r for r in results[:SAMPLE] if type(r) is not Failure]
    if not inputs:
        return 0.0
    whole = _round_trip(inputs, outputs, clock)
    if len(inputs) < 2 or whole == float("inf"):
        return whole / len(inputs)
    one = _round_trip(inputs[:1], outputs[:1], clock)
    return max(0.0, whole - one) / (len(inputs) - 1)


def _round_trip(inputs: list, outputs: list, clock) -> float:
    """The best of three: seconds to pickle and unpickle ``inputs`` and ``outputs`` stacked, as they go
    through the pipe: their big arrays travel in shared memory instead (``slab_bytes`` counts them)."""
    from .. import structure

    try:
        outputs = structure.stack(outputs) if outputs else outputs
    except Exception:  # noqa: BLE001 - results of different shapes travel one by one
        outputs = [_in_pipe(r, True) for r in outputs]
    else:
        outputs = _in_pipe(outputs, True)
    from .slab_blocks import TAKEN_APART

    inputs = [_in_pipe(x, type(x) in TAKEN_APART) for x in inputs]
    best = float("inf")
    for _ in range(3):  # the first round trip of a type pays one-off costs (pickle's dispatch, imports)
        t0 = clock()
        try:
            pickle.loads(pickle.dumps(inputs, protocol=5))
            pickle.loads(pickle.dumps(outputs, protocol=5))
        except Exception:  # noqa: BLE001 - not picklable: they cannot cross to a process
            return float("inf")
        best = min(best, clock() - t0)
    return best


def _in_pipe(value, slab_kind: bool):
    """``value`` as it goes through a worker's pipe: its big arrays left out when it is of a kind that sends
    them in shared memory."""
    from .. import structure
    from .slab_blocks import big_array

    if not slab_kind or not isinstance(value, (np.ndarray, tuple, list, dict)):
        return value
    return structure.pack_as(value, [None if big_array(x) else x for x in structure.flatten(value)])


def moved_bytes(elements: list, results: list) -> float:
    """Bytes of an element and of its result that travel pickled, on average over ``elements`` and
    ``results``: the buffers in them (numpy arrays, bytes, str) but the big arrays that travel in shared
    memory (``slab_bytes``). (An int or a float is a few bytes of pickle: ``transfer_seconds`` has it.)"""
    return _split_bytes(elements, results)[0]


def slab_bytes(elements: list, results: list) -> float:
    """Bytes of an element and of its result that travel in shared memory (``shared_memory``), on average:
    big arrays of a result, and of an element that is an array, a plain tuple or a plain dict."""
    return _split_bytes(elements, results)[1]


def _split_bytes(elements: list, results: list):
    """(pickled bytes, slab bytes) of an element and of its result, on average (``moved_bytes``, ``slab_bytes``)."""
    from .. import structure
    from .blocks import Failure
    from .slab_blocks import TAKEN_APART, big_array

    def size(values, slab_kinds):
        pickled = slab = 0
        for value in values:
            if type(value) is Failure:
                continue
            in_slab = slab_kinds is None or type(value) in slab_kinds
            for leaf in structure.flatten(value):
                if isinstance(leaf, (bytes, bytearray, str)):
                    pickled += len(leaf)
                elif type(leaf) is np.ndarray and leaf.dtype != object:
                    if in_slab and big_array(leaf):
                        slab += leaf.nbytes
                    else:
                        pickled += leaf.nbytes
        return pickled, slab

    if not elements or not results:
        return 0.0, 0.0
    e_pickled, e_slab = size(elements, TAKEN_APART)
    r_pickled, r_slab = size(results, None)
    return e_pickled / len(elements) + r_pickled / len(results), e_slab / len(elements) + r_slab / len(results)


_fresh_byte_seconds: float | None = None  # measured once per process (``fresh_byte_seconds``)


def fresh_byte_seconds() -> float:
    """CPU seconds a byte costs written into fresh memory (a page fault per page, the kernel zeroing it, the
    copy), measured on this machine the first time it is asked, once per process."""
    global _fresh_byte_seconds
    if _fresh_byte_seconds is None:
        _fresh_byte_seconds = time_fresh_writes(FRESH_SAMPLE)
    return _fresh_byte_seconds


def time_fresh_writes(size: int, clock=time.thread_time, tries: int = 3) -> float:
    """The least CPU seconds per byte of ``tries`` copies of ``size`` warm bytes into newly mapped memory.
    CPU time: being descheduled adds only wall time; a page fault is the faulting thread's (system) CPU."""
    source = bytearray(b"\x01") * size  # written once: warm
    best = float("inf")
    for _ in range(tries):
        with mmap.mmap(-1, size) as fresh:
            t0 = clock()
            fresh[:] = source
            best = min(best, clock() - t0)
    return max(0.0, best) / size


# ------------------------------------------------------------------------------------------ remembered
def remembered(ctx, node) -> Decision | None:
    """The decision an earlier iterator of the same Dataset made for ``node``, if any."""
    slot = autotune.learned_slot(ctx, node)
    return None if slot is None else slot[0].get(slot[1] + ("executor",))


def chosen_executors(learned: dict, root) -> str:
    """The decisions a Dataset's iterators made (``learned``: ``Dataset._learned``) for the stages of its
    optimized graph ``root``, one line each (``Dataset.explain``); "" when none was made yet."""
    from .. import graph

    lines = []
    for place, node in enumerate(graph.walk(root)):
        decision = learned.get((place, node.kind, "executor"))
        if decision is not None:
            lines.append(f"executor of {node.label()}: {decision}")
    return "\n".join(lines)


def remember(ctx, node, decision: Decision) -> None:
    """Keep ``decision`` for the ``Dataset``'s next iterators, unless the measurement left it open."""
    slot = autotune.learned_slot(ctx, node)
    if slot is not None and decision.final:
        slot[0][slot[1] + ("executor",)] = decision
