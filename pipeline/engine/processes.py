"""Starting worker processes: one multiprocessing context for the engine's workers (``iterators/process_map.py``'s
map workers, ``engine/remote_inner.py``'s inner-dataset workers), a start that leaves the user's ``__main__``
alone, and what a worker does first, whichever kind: leave Ctrl-C to its consumer, end when its consumer
dies, take its consumer's environment and reseed numpy's global random state."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

_ctx = None
_start_lock = threading.Lock()


def mp_context():
    """The forkserver context (preloading the worker modules), or spawn where forkserver is missing."""
    global _ctx
    if _ctx is None:
        try:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "cloudpickle", "jaxfeed.pipeline.engine.worker",
                                        "jaxfeed.pipeline.engine.inner_worker"])
        except ValueError:
            ctx = multiprocessing.get_context("spawn")
        _ctx = ctx
    return _ctx


def start_without_main(process) -> None:
    """Start ``process`` without re-running the user's ``__main__`` in it.

    spawn/forkserver children normally re-import the main script (a script without an
    ``if __name__ == "__main__"`` guard would then start the pipeline again in every worker). Workers need
    nothing from it: functions travel by cloudpickle, by value. So the preparation data handed to the
    child is stripped of the main module, for the duration of this start only."""
    from multiprocessing import spawn

    with _start_lock:
        original = spawn.get_preparation_data

        def without_main(name):
            data = original(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = without_main
        try:
            process.start()
        finally:
            spawn.get_preparation_data = original


def worker_reason() -> str | None:
    """Why this process cannot start worker processes, or None: it is itself a worker process (a daemon, as
    the engine's workers are -- a map function or generator running there that iterates a pipeline of its
    own). multiprocessing refuses such a start with an AssertionError."""
    if multiprocessing.current_process().daemon:
        return "this process is itself a worker process (daemonic), which cannot start processes"
    return None


def take_environment(environ: dict) -> None:
    """In a worker: make ``os.environ`` the consumer's (``environ``, as it was when it asked). A forkserver's
    children inherit the environment the server started with -- the first worker start of the process --
    not the consumer's now: a function reading a variable set since saw the old value."""
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)


def fresh_random_state() -> None:
    """In a worker: numpy's global random state reseeded from the OS. A worker is a fork of the forkserver, so
    every worker started the global state where the server had it: a function drawing from ``np.random``
    drew the same numbers in every worker, and again in every epoch's new workers (1,053 distinct values of
    2,000 draws on two workers, the same 1,053 the next epoch) -- augmentations repeated without a word.
    Python's ``random`` reseeds itself after a fork; numpy's does not. (Per-element randomness that is the
    same whoever runs it is ``map(..., with_rng=True)``.)"""
    import numpy as np

    np.random.seed()


KEEP_FREED_BYTES = 64 << 20  # (``keep_freed_memory``)


def keep_freed_memory() -> None:
    """In a worker (glibc only): freed memory is kept for the next task instead of going back to the system.

    A map worker's results -- a block of P4's 48 KB images, 6 MB -- are freed once stacked into the shared
    slab, and glibc gives freed memory at the top of its heap back to the system whenever it exceeds 128 KB;
    the next block then page-faults all of it in again: 10 faults an image, as much time as the function's
    own work on this machine. (A process that itself allocates something big -- the hand loop's ``np.stack``
    of a batch -- is spared: glibc raises both thresholds when it frees a big block; a worker that stacks into
    shared memory never does.) Fixed thresholds of ``KEEP_FREED_BYTES`` do what that raise does. A worker is
    our process, with the user's function alone in it; the user's own process is left as it is."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to set
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_trim_threshold, KEEP_FREED_BYTES)
    mallopt(m_mmap_threshold, 32 << 20)  # (glibc's largest: blocks above it are mapped and unmapped each time)


WATCH_SECONDS = 1.0  # how often a worker checks that its consumer lives (``outlive_no_consumer``)


def outlive_no_consumer(consumer: int) -> None:
    """In a worker: end this process within ``WATCH_SECONDS`` of its consumer's (pid ``consumer``) death. A
    worker also ends when it finds its pipe closed, but only between requests: one inside a function or
    generator that never returns (waiting on a file, a socket) outlived a consumer killed with SIGKILL -- or
    by the OOM killer -- for good, holding its memory and CPU. Watched from a thread, which ends the process
    whatever the main thread is doing."""
    def watch():
        while True:
            time.sleep(WATCH_SECONDS)
            if not _alive(consumer):
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="jaxfeed-worker-watch").start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (dead, not yet reaped by its parent) is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def ignore_interrupts() -> None:
    """In a worker, first thing: Ctrl-C reaches every process of the terminal's process group, workers
    included, and is the consumer's to handle. A worker that took it died with a traceback of its own on
    stderr (one per worker, around the user's), and a consumer that caught it -- to save a checkpoint,
    say -- found its workers gone. A worker ends when its consumer closes it, or exits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop(procs, grace: float, patience: float) -> None:
    """Make sure ``procs`` (told to exit, or not) are gone: each gets ``grace`` seconds to exit by itself --
    a worker blocked writing an answer nobody will read never sees its stop -- then is terminated, given
    ``patience`` seconds, and killed."""
    for p in procs:
        p.join(grace)
        if p.is_alive():
            p.terminate()
            p.join(patience)
        if p.is_alive():
            p.kill()
            p.join()
