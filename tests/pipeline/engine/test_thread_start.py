"""Threads handed to the starter thread: the caller never waits for them to run, a close path's join waits
for a pending start, and nothing is left behind or aborts at interpreter exit."""

import os
import subprocess
import sys
import threading

import pytest

from jaxfeed.pipeline.engine.thread_start import join_started, start_soon, wait_handled


class GatedThread(threading.Thread):
    """A thread whose ``start`` blocks until the test opens the gate (what a busy machine does to
    ``Thread.start``: it waits for the new thread to get the GIL)."""

    def __init__(self, gate, **kwargs):
        super().__init__(daemon=True, **kwargs)
        self.gate = gate
        self.entered = threading.Event()

    def start(self):
        self.entered.set()
        self.gate.wait()
        super().start()


def test_the_caller_goes_on_while_the_start_waits():
    gate, ran = threading.Event(), threading.Event()
    t = GatedThread(gate, target=ran.set)
    start_soon(t)  # would block here if the caller started it itself
    assert t.entered.wait(30)  # the starter is inside start(), waiting
    assert not ran.is_set()
    gate.set()
    join_started(t, timeout=30)
    assert ran.is_set() and not t.is_alive()


def test_join_started_waits_for_a_pending_start_then_joins():
    gate, ran = threading.Event(), threading.Event()
    t = GatedThread(gate, target=ran.set)
    start_soon(t)
    assert t.entered.wait(30)
    opener = threading.Timer(0.05, gate.set)
    opener.start()
    join_started(t, timeout=30)  # a plain t.join() here raises: the thread is not started yet
    assert ran.is_set() and not t.is_alive()
    opener.join()


def test_a_thread_that_cannot_start_is_nothing_to_join():
    class Refused(threading.Thread):
        def start(self):
            raise RuntimeError("can't create new thread at interpreter shutdown")

    t = Refused(target=lambda: None, daemon=True)
    start_soon(t)
    join_started(t, timeout=30)  # returns: handled, never started
    assert t.ident is None
    ok = threading.Thread(target=lambda: None, daemon=True)  # the starter goes on with later requests
    start_soon(ok)
    join_started(ok, timeout=30)
    assert ok.ident is not None and not ok.is_alive()


def test_join_started_of_a_plain_started_thread_is_its_join():
    t = threading.Thread(target=lambda: None, daemon=True)
    t.start()
    join_started(t, timeout=30)
    assert not t.is_alive()


def test_exit_with_starts_pending_is_clean():
    code = (
        "import threading, time\n"
        "from jaxfeed.pipeline.engine.thread_start import start_soon\n"
        "stop = threading.Event()\n"
        "for _ in range(50):\n"
        "    start_soon(threading.Thread(target=stop.wait, daemon=True))\n"
        "print('bye')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bye" and proc.stderr == ""


def test_wait_handled_returns_once_every_earlier_request_is_started():
    gate = threading.Event()
    t = GatedThread(gate, target=lambda: None)
    start_soon(t)
    assert t.entered.wait(30)
    assert not wait_handled(0.05)  # the starter is still inside t's start
    gate.set()
    assert wait_handled(30) and t.ident is not None
    join_started(t, timeout=30)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_starts_its_parents_pending_threads():
    # the parent's starter is held inside a start when the fork happens; its other pending thread must not
    # run in the child (it would run the parent's stage there), and the child can start its own threads
    gate = threading.Event()
    held = GatedThread(gate, target=lambda: None)
    start_soon(held)
    assert held.entered.wait(30)
    marker = threading.Thread(target=lambda: os.write(1, b"parent's thread ran\n"), daemon=True)
    start_soon(marker)  # pending behind the held one
    pid = os.fork()
    if pid == 0:  # child: only os-level calls and the module under test; always leave with os._exit
        status = 1
        try:
            join_started(marker, timeout=5)  # handled in the child (never started), not waited for 5 s
            mine = threading.Thread(target=lambda: None, daemon=True)
            start_soon(mine)
            join_started(mine, timeout=30)
            status = 0 if (marker.ident is None and mine.ident is not None) else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    gate.set()
    join_started(held, timeout=30)
    join_started(marker, timeout=30)
    assert os.waitstatus_to_exitcode(status) == 0
