"""How big arrays cross between the consumer and map worker processes (``engine/shared_memory.py``): a task's
input columns stacked into an input slab, its results stacked into a result slab and handed out where they lie,
the slab lent again only once nothing views it. What a user can see: the same values, types and writability
as on threads, results that stay valid however long they are held (after the iterator, its workers, the
interpreter), and a bounded amount of shared memory."""

import collections
import gc
import mmap
import os
import platform
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.engine import shared_memory, slab_blocks, worker
from jaxfeed.pipeline.iterators import process_map
from jaxfeed.pipeline.testing import assert_elements_equal

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory in /dev/shm")


def pmap(ds, fn, workers=2, **kw):
    return ds.map(fn, num_parallel_calls=workers, executor="process", **kw)


def image(x):
    """A 48 KB float image keyed on ``x``: big enough to travel in shared memory."""
    return np.full((64, 64, 3), float(x), np.float32)


def root_base(array):
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


def test_held_results_keep_their_values_while_their_slabs_would_be_lent_again():
    """Every batch is held to the end (``list``): a slab lent again while a batch still viewed it would
    change that batch under the user's eyes."""
    ds = Dataset.range(700)
    got = list(pmap(ds, image).batch(16))
    assert_elements_equal(got, list(ds.map(image).batch(16)))
    first = next(iter(pmap(ds, image).batch(16)))  # held while a whole epoch runs through the same pool
    expected = first.copy()
    for _ in pmap(ds, image).batch(16):
        pass
    np.testing.assert_array_equal(first, expected)


def test_results_view_the_slab_they_came_in_and_past_the_budget_are_copied(monkeypatch):
    batches = list(pmap(Dataset.range(256), image).batch(16))
    # (the first tasks' results are pickled: the slabs' size is learned from them)
    assert all(isinstance(root_base(b), mmap.mmap) for b in batches[4:])  # handed out where they lie
    monkeypatch.setattr(process_map, "handout_budget", lambda: 0)
    process_map.close_idle_pools()
    batches = list(pmap(Dataset.range(64), image).batch(16))
    assert all(isinstance(root_base(b), bytearray) for b in batches)  # copied out of the slab
    assert_elements_equal(batches, list(Dataset.range(64).map(image).batch(16)))


def test_the_slabs_handed_out_stay_within_the_budget(monkeypatch):
    budget = 3 << 20
    monkeypatch.setattr(process_map, "handout_budget", lambda: budget)
    pools = []
    open_pool = process_map.open_pool
    monkeypatch.setattr(process_map, "open_pool", lambda *a: pools.append(open_pool(*a)) or pools[-1])
    it = iter(pmap(Dataset.range(600), image))
    held = []
    for x in it:
        held.append(x)  # every result held: without a budget, every task would take a new slab
        assert pools[0].slabs.out_bytes <= budget
    assert_elements_equal(held, [image(i) for i in range(600)])


def test_a_result_held_after_the_iterator_its_workers_and_the_interpreter_stays_valid():
    script = textwrap.dedent("""
        import gc, numpy as np
        from jaxfeed.pipeline import Dataset
        from jaxfeed.pipeline.iterators import process_map

        def image(x):
            return np.full((64, 64, 3), float(x), np.float32)

        it = iter(Dataset.range(300).map(image, num_parallel_calls=2, executor="process").batch(32))
        b = next(it)
        it.close()
        last = list(Dataset.range(300).map(image, num_parallel_calls=2, executor="process").batch(32))[-1]
        process_map.close_idle_pools()
        gc.collect()
        assert (b == np.stack([image(i) for i in range(32)])).all()
        assert (last == np.stack([image(i) for i in range(288, 300)])).all()
        print("held", float(b.sum()), float(last.sum()))  # and still held at exit
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "held" in out.stdout
    for bad in ("Exception ignored", "BufferError", "leaked shared_memory", "Traceback"):
        assert bad not in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------ inputs
Pair = collections.namedtuple("Pair", "i image")


def what_came_all(*xs):
    return what_came(xs if len(xs) > 1 else xs[0])


def what_came(x):
    """What a function sees of its element: types, dtypes, shapes, writability, dict key order."""
    if isinstance(x, dict):
        return {"keys": ",".join(x).encode(), **{k: what_came(v) for k, v in x.items()}}
    if isinstance(x, tuple):
        return (type(x).__name__.encode(),) + tuple(what_came(v) for v in x)
    if isinstance(x, np.ndarray):
        flags = [x.flags.writeable, x.flags.c_contiguous, x.flags.f_contiguous, x.ndim, x.size]
        return np.array(flags, np.int64), x.dtype.str.encode(), x.copy()
    return type(x).__name__.encode(), np.asarray(x).copy()


@pytest.mark.parametrize("kind", ["array", "tuple", "dict", "writable", "mixed-writability", "namedtuple",
                                  "fortran-order", "big-endian"])
def test_a_workers_elements_equal_the_consumers(kind):
    images = np.arange(40 * 32 * 32 * 3, dtype=np.uint16).reshape(40, 32, 32, 3)
    source = Dataset.from_tensor_slices(images)  # read-only views of the user's array
    ds = {
        "array": source,
        "tuple": source.enumerate(),
        "dict": source.enumerate().map(lambda i, im: {"z": im, "a": i, "m": im[0]}),  # key order z, a, m
        "writable": source.map(lambda im: im + 1),
        "mixed-writability": Dataset.range(40).map(read_only_view),  # a block of both: not stacked
        "namedtuple": source.enumerate().map(lambda i, im: Pair(i, im)),
        "fortran-order": source.map(lambda im: np.asfortranarray(im[..., 0])),
        "big-endian": source.map(lambda im: im.astype(">u2")),
    }[kind]
    assert_elements_equal(list(pmap(ds, what_came_all)), list(ds.map(what_came_all)))


def read_only_view(i):
    out = np.full(3000, i)
    if i % 2:
        out.flags.writeable = False
    return out


def test_writability_of_each_element_crosses_as_it_is():
    ds = Dataset.range(40).map(read_only_view)
    assert [bool(v[0][0]) for v in pmap(ds, what_came)] == [i % 2 == 0 for i in range(40)]


def test_writing_into_an_element_in_a_worker_never_reaches_the_users_data():
    """A worker's elements are its own copies, where the write changes nothing of the user's (on threads an
    element viewing the user's array is read-only: ``test_elements_read_only.py``)."""
    def bump(x):
        x += 1
        return x

    data = np.zeros((20, 32, 32), np.float32)
    source = Dataset.from_tensor_slices(data)
    assert_elements_equal(list(pmap(source, bump)), [np.ones((32, 32), np.float32)] * 20)
    assert not data.any()
    writable = source.map(lambda x: x * 1)
    assert_elements_equal(list(pmap(writable, bump)), list(writable.map(bump)))


def test_pack_block_stacks_like_array_columns_and_leaves_the_rest():
    buf = bytearray(1 << 20)
    writer = slab_blocks.SlabWriter(memoryview(buf))
    block = [(np.int64(i), np.full((32, 32), i, np.float32), b"x" * i) for i in range(8)]
    packed = slab_blocks.pack_block(block, writer)
    assert type(packed) is slab_blocks.Columns and packed.kind == "tuple"
    assert [type(c) for c in packed.columns] == [list, tuple, list]  # only the arrays went into the slab
    assert_elements_equal(slab_blocks.unpack_block(packed, memoryview(buf)), block)
    small = [np.zeros(3) for _ in range(4)]  # 96 bytes in all: pickled
    assert slab_blocks.pack_block(small, slab_blocks.SlabWriter(memoryview(buf))) is small
    writer = slab_blocks.SlabWriter(memoryview(bytearray(100)))  # too small: counted, left pickled
    assert slab_blocks.pack_block(block, writer) is block and writer.short and writer.offset >= 8 * 4096


# ------------------------------------------------------------------------------------------ workers
def test_a_block_of_half_a_batch_or_more_grows_to_the_batch_end():
    sized = process_map.ProcessMapIterator._sized
    at = lambda position: types.SimpleNamespace(rows_per_batch=128, _position=position)  # noqa: E731
    assert sized(at(8), 80) == 120  # to the end of the first batch: one worker's block makes it
    assert sized(at(0), 64) == 128
    assert sized(at(0), 300) == 256
    assert sized(at(0), 40) == 40  # a slow function's blocks: several workers make a batch
    assert sized(types.SimpleNamespace(rows_per_batch=1, _position=5), 7) == 7


def test_an_explicit_process_map_under_a_batch_makes_blocks_of_whole_batches():
    from jaxfeed.pipeline.iterators.batch import BatchIterator

    it = iter(pmap(Dataset.range(100), image).batch(32))
    next(it)
    todo, found = [it._it], []
    while todo:
        node = todo.pop()
        if isinstance(node, BatchIterator):
            found.append(node.input.rows_per_batch)
        todo += [c for c in node.children()] if hasattr(node, "children") else []
    it.close()
    assert found == [32]


def maps_of_slabs(x):
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/jaxfeed_" in line}
    return {"image": image(x), "mapped": np.int64(len(mapped))}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux /proc")
def test_a_worker_keeps_a_bounded_number_of_slabs_mapped(monkeypatch):
    monkeypatch.setattr(process_map, "MAX_BLOCK", 8)  # many tasks, each a slab of its own while held
    held = list(pmap(Dataset.range(400), maps_of_slabs))
    assert len({id(root_base(r["image"])) for r in held}) > worker.MAX_ATTACHED  # the consumer made many
    assert max(int(r["mapped"]) for r in held) <= worker.MAX_ATTACHED


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
@pytest.mark.parametrize("keep", [False, True])
def test_a_worker_keeps_freed_memory_for_its_next_task(keep):
    """A block of results freed once stacked into the slab went back to the system and was faulted in again
    for the next block: ~12 faults a 48 KB result."""
    script = textwrap.dedent(f"""
        import resource, numpy as np
        from jaxfeed.pipeline.engine.processes import keep_freed_memory
        if {keep}:
            keep_freed_memory()
        image = np.zeros((64, 64, 3), np.uint8)
        def block():
            results = [image.astype(np.float32) * 2.0 for _ in range(128)]
            del results
        block()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            block()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    faults = int(out.stdout.split()[-1])
    if keep:
        assert faults < 200  # 20 blocks of 6 MB: the pages stay
    else:
        assert faults > 20 * 128  # (the default glibc behaviour this guards against)


def test_slabs_of_a_closed_pool_are_unlinked_even_when_results_still_view_them():
    gc.collect()
    before = set(os.listdir("/dev/shm"))  # (an earlier test's iterator still alive holds its own)
    held = list(pmap(Dataset.range(64), image).batch(16))
    process_map.close_idle_pools()
    gc.collect()
    assert not [n for n in set(os.listdir("/dev/shm")) - before if n.startswith(shared_memory.PREFIX)]
    assert_elements_equal(held, list(Dataset.range(64).map(image).batch(16)))


def test_without_room_in_dev_shm_tasks_go_without_slabs_and_results_stay_whole(monkeypatch):
    """A worker writing into a slab the tmpfs cannot back dies of SIGBUS: no room, no slab (pickled)."""
    monkeypatch.setattr(shared_memory, "shm_has_room", lambda nbytes: False)
    before = set(os.listdir("/dev/shm"))
    ds = Dataset.from_tensor_slices(np.zeros((50, 64, 64, 3), np.uint8)).enumerate()
    got = list(pmap(ds, lambda i, im: im.astype(np.float32) + i).batch(8))
    assert_elements_equal(got, list(ds.map(lambda i, im: im.astype(np.float32) + i).batch(8)))
    assert not [n for n in set(os.listdir("/dev/shm")) - before if n.startswith(shared_memory.PREFIX)]


_KEPT = []


def minus_kept(x):
    """A function that keeps an element past its call (the 100th, well into the tasks that carry their inputs
    in a slab) and subtracts it from every later one."""
    if x[0] == 100 * 2048:
        _KEPT.append(x)
    return x - _KEPT[0] if _KEPT else x


def test_an_element_a_function_keeps_is_its_own_not_a_view_of_a_slab_lent_again(monkeypatch):
    monkeypatch.setattr(process_map, "MAX_BLOCK", 16)  # many tasks: the input slabs are lent again and again
    ds = Dataset.from_tensor_slices(np.arange(600 * 2048, dtype=np.float32).reshape(600, 2048))
    got = list(pmap(ds, minus_kept, workers=1))  # one worker: it sees the elements in order
    _KEPT.clear()
    assert_elements_equal(got, list(ds.map(minus_kept)))


_CALLS = [0]


def counted(x):
    """A 48 KB image of how many calls its worker made: every epoch writes other values."""
    _CALLS[0] += 1
    return np.full((64, 64, 3), float(_CALLS[0]), np.float32)


@pytest.mark.skipif(not hasattr(os, "fork") or not sys.platform.startswith("linux"), reason="os.fork, Linux")
def test_a_forked_child_holds_its_results_as_a_copy_would():
    """Results handed out viewing a slab are shared mappings: a child forked while holding them must neither
    see the slab lent again (a worker writing the next epoch into it) nor share writes with its parent."""
    ds = pmap(Dataset.range(512), counted, workers=1).batch(32)
    batches = list(ds)
    kept, dropped = batches[3], batches[-1]  # (the first tasks' results are pickled: the slabs' size is learned)
    assert root_base(kept) is not root_base(dropped) and isinstance(root_base(dropped), mmap.mmap)
    del batches
    want_kept, want_dropped = kept.copy(), dropped.copy()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits while the parent recycles, writes into its arrays, checks what it holds
        try:
            os.close(go_w)
            os.read(go_r, 1)
            ok = np.array_equal(dropped, want_dropped)
            kept[:] = -1  # the parent's `kept` must not change
            os._exit(0 if ok and (kept == -1).all() else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    os.close(go_r)
    del dropped
    gc.collect()
    for _ in range(3):  # the same kept pool: slabs lent again, other values written into them
        for _ in ds:
            pass
    os.write(go_w, b"x")
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(kept, want_kept)


def test_inputs_bigger_than_a_task_budget_still_go_through_a_slab(monkeypatch):
    """An element over ``TASK_BYTES`` (1.5 MiB against a 1 MiB budget here) makes tasks of one element; the
    input slab grows to hold it instead of staying at the budget and sending every element pickled."""
    monkeypatch.setattr(process_map, "TASK_BYTES", 1 << 20)
    packed = []
    pack_block = process_map.pack_block

    def recorded(block, writer):
        packed.append(pack_block(block, writer))
        return packed[-1]

    monkeypatch.setattr(process_map, "pack_block", recorded)
    volumes = Dataset.range(12).map(lambda i: np.full((6, 1 << 16), i, np.float32))
    got = list(pmap(volumes, lambda v: v[:, :4].sum(axis=1), workers=1))
    assert_elements_equal(got, list(volumes.map(lambda v: v[:, :4].sum(axis=1))))
    assert any(type(p) is slab_blocks.Columns for p in packed[1:])


def _worker_slab_maps(pool) -> dict:
    """{worker pid: the slabs it maps} ('(deleted)' marks one the consumer unlinked)."""
    out = {}
    for p in pool.procs:
        with open(f"/proc/{p.pid}/maps") as f:
            out[p.pid] = sorted({line.split(maxsplit=5)[-1].strip() for line in f if "/jaxfeed_" in line})
    return out


def _eventually(check, seconds=30.0):
    """``check()`` once it holds, or its last value after ``seconds`` (a hang guard: a worker reads its
    messages in order, whenever it is scheduled)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def _idle_pool():
    (pool,) = process_map._IDLE.values()
    return pool


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux /proc")
def test_a_worker_unmaps_the_slabs_the_consumer_dropped():
    """A slab's memory is freed only once no process maps it. A worker kept up to ``MAX_ATTACHED`` slabs mapped,
    those the consumer had replaced by bigger ones included: in /dev/shm they held ~15-30 MB an epoch of P4 in
    processes, unlinked, until the workers exited."""
    ds = pmap(Dataset.range(3000), image).batch(256)  # the first blocks are small: their slabs are replaced
    assert sum(float(b[:, 0, 0, 0].sum()) for b in ds) == sum(range(3000))
    pool = _idle_pool()

    def no_deleted():
        maps = _worker_slab_maps(pool)
        return maps if not any("(deleted)" in m for ms in maps.values() for m in ms) else None

    assert _eventually(no_deleted), _worker_slab_maps(pool)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux /proc")
def test_an_idle_pool_holds_nothing_in_a_small_dev_shm(monkeypatch):
    """A pool kept between epochs kept its slabs (~50 MB for P4 in processes): most of a container's 64 MB
    /dev/shm, taken from every other program there. Past ``1/IDLE_SHM_SHARE`` of /dev/shm it drops them; a batch
    the user still holds stays valid and its memory goes with it."""
    monkeypatch.setattr(process_map, "shm_size", lambda: 64 << 20)
    before = set(os.listdir("/dev/shm"))  # (an earlier test's iterator the collector has not reached yet)
    ds = pmap(Dataset.range(3000), image).batch(256)
    for held in ds:  # (the last batch is held when the epoch ends)
        pass
    pool = _idle_pool()
    assert pool.slabs.held_bytes() == pool.inboxes.held_bytes() == 0
    assert not [n for n in set(os.listdir("/dev/shm")) - before if n.startswith(shared_memory.PREFIX)]
    assert _eventually(lambda: not any(_worker_slab_maps(pool).values())), _worker_slab_maps(pool)
    assert_elements_equal(held, np.stack([image(x) for x in range(2816, 3000)]))
    assert_elements_equal(list(ds)[-1], held)  # the next epoch makes slabs again
    del held


def test_an_idle_pool_keeps_its_slabs_where_dev_shm_has_room(monkeypatch):
    """Where /dev/shm is large the slabs stay for the next epoch (each new one is page faults again)."""
    monkeypatch.setattr(process_map, "shm_size", lambda: 64 << 30)
    ds = pmap(Dataset.range(3000), image).batch(256)
    total = sum(float(b[:, 0, 0, 0].sum()) for b in ds)
    gc.collect()
    assert total == sum(range(3000)) and _idle_pool().slabs.held_bytes() > 0
