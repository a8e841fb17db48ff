"""Ctrl-C during an iterator's step (``engine/interrupts.py``): raised when the step returns, with its
element delivered and the iterator whole -- its state resumes exactly and its stream goes on exactly.

A bug CI found: Ctrl-C landing inside a step (a slot marked as being read, then never read) made the
``get_state`` a script called to save a checkpoint wait forever; landing while a step waited, it lost the
elements the step held (a remote slot's read, a batch's first rows). Each case runs in a script of its own:
a signal to the test process itself would stop the test run."""

import os
import subprocess
import sys
import textwrap

import pytest

_COMMON = """
import os, signal, sys, threading, time
# Python's own handler, as in a terminal: a shell that starts a job in the background (a CI runner's, nohup)
# leaves SIGINT ignored in it, and that is inherited
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec

def values(ds, n=None):
    out = []
    for x in ds if n is None else ds.take(n):
        out.append(np.asarray(x).tolist())
    return out

def consume(it, convert):
    # every element, noting where a Ctrl-C was raised -- after a step (its element delivered: b holds it)
    # or inside one -- and saving the state there
    got, where, state = [], None, None
    while True:
        b = None
        try:
            b = next(it)
            got.append(convert(b))
            b = None
        except StopIteration:
            return got, where, state
        except KeyboardInterrupt:
            where = "after the step" if b is not None else "inside the step"
            if b is not None:
                got.append(convert(b))
            try:
                state = it.get_state()
            except Exception as e:  # (after a second Ctrl-C the iterator may not go on)
                print("get_state failed", type(e).__name__)
"""

_ONE_STEP = _COMMON + """
CASE = sys.argv[1]
hits = []

def slow_double(x):
    # the user function the step runs on this thread; Ctrl-C comes at element 5 (twice: the 'twice' case)
    if int(x) == 5 and not hits:
        hits.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        if CASE == "twice":
            os.kill(os.getpid(), signal.SIGINT)
        for _ in range(3):
            time.sleep(0.001)
    return x * 2

ds = Dataset.range(20).map(slow_double).batch(4)
hits.append(1)
want = values(ds)  # (the stream without the signal)
hits.clear()
if CASE == "traced":
    sys.settrace(lambda *a: None)  # a debugger or coverage runs: Ctrl-C is raised at once, as before
got, where, state = consume(iter(ds), lambda b: np.asarray(b).tolist())
sys.settrace(None)
print("where", where)
print("same", got == want)
if CASE == "once":
    again = iter(Dataset.range(20).map(slow_double).batch(4))
    again.set_state(state)
    print("resumes", [np.asarray(x).tolist() for x in again] == want[2:])
"""


@pytest.mark.parametrize("case, where, same", [
    ("once", "after the step", True),      # deferred: the batch [4..7] is delivered, the stream exact
    ("traced", "inside the step", False),  # another tracer: raised at once (the batch's gathered rows are lost)
    ("twice", "inside the step", False),   # the second Ctrl-C: raised where it lands
])
def test_ctrl_c_inside_a_step_is_raised_when_the_step_returns(tmp_path, case, where, same):
    script = tmp_path / "one_step.py"
    script.write_text(_ONE_STEP)
    done = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"where {where}" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert f"same {same}" in done.stdout, (done.stdout, done.stderr[-3000:])
    if case == "once":  # the state saved in the handler is the one after the delivered batch
        assert "resumes True" in done.stdout, (done.stdout, done.stderr[-3000:])


_HINT = _COMMON + """
from jaxfeed.pipeline.engine import interrupts

hinted = threading.Event()

class Watch:  # stderr, noting the hint
    def write(self, s):
        if "Press Ctrl-C again" in s:
            hinted.set()
        return sys.__stderr__.write(s)
    def flush(self):
        sys.__stderr__.flush()

sys.stderr = Watch()

def stuck():
    yield 1
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(12000):  # a read that takes long: the hint says why Ctrl-C did nothing yet
        if hinted.is_set():
            break
        time.sleep(0.01)
    yield 2
    yield 3

it = iter(Dataset.from_generator(stuck, output_signature=TensorSpec((), np.int64)))
got = [int(next(it))]
try:
    got.append(int(next(it)))
    got.append(int(next(it)))
except KeyboardInterrupt:
    got.append("KeyboardInterrupt")
got += [int(x) for x in it]
print("got", got, "hinted", hinted.is_set())
"""


def test_a_step_that_goes_on_after_ctrl_c_says_why_and_raises_it_when_it_returns(tmp_path):
    script = tmp_path / "hint.py"
    script.write_text(_HINT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "got [1, 2, 'KeyboardInterrupt', 3] hinted True" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert "Press Ctrl-C again" in done.stderr


def test_a_handler_of_the_users_own_is_left_in_place(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(_COMMON + textwrap.dedent("""
        def mine(signum, frame):
            print("mine")
        signal.signal(signal.SIGINT, mine)
        it = iter(Dataset.range(3))
        print("kept", signal.getsignal(signal.SIGINT) is mine, values(Dataset.range(3)))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        it = iter(Dataset.range(3))
        print("ours", signal.getsignal(signal.SIGINT) is not signal.default_int_handler)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "kept True [0, 1, 2]" in done.stdout and "ours True" in done.stdout, (done.stdout, done.stderr)


# Ctrl-C anywhere in the steps of pipelines that run threads and worker processes: at the n-th line the
# step runs here, or in the n-th wait it calls (a simulated signal: ``_thread.interrupt_main``); the stream
# and the states must be those of an uninterrupted run.
_ANYWHERE = _COMMON + """
import _thread
from jaxfeed.pipeline.engine import remote_inner

KIND, MODE, COUNT = sys.argv[1], sys.argv[2], int(sys.argv[3])

SLOW = MODE == "wait"  # producers slower than the consumer: its steps wait

def rows(i):
    for j in range(10 ** 6):
        if SLOW and j % 64 == 0:
            time.sleep(0.001)
        yield {"x": int(i) * 10 ** 6 + j}

def times3(x):
    if SLOW:
        time.sleep(0.0002)
    return x * 3

o = Options()
o.autotune.cpu_budget = 2

def make(par):
    if KIND == "remote_interleave":  # slots read in worker processes
        sig = {"x": TensorSpec((), np.int64)}
        return Dataset.range(8).interleave(
            lambda i: Dataset.from_generator(rows, args=(i,), output_signature=sig, replayable=True),
            cycle_length=4, num_parallel_calls=AUTOTUNE if par else None).batch(64).with_options(o)
    if KIND == "thread_interleave":  # slots read on threads, a prefetch thread
        return Dataset.range(8).interleave(
            lambda i: Dataset.range(i * 10 ** 6, i * 10 ** 6 + 10 ** 6).map(lambda x: {"x": times3(x) // 3}),
            cycle_length=4, num_parallel_calls=4 if par else None).batch(64).prefetch(2 if par else 0).with_options(o)
    return Dataset.range(10 ** 9).map(times3, num_parallel_calls=2 if par else None,
                                      executor="process" if par else "thread").batch(64).with_options(o)

def key(b):
    return np.asarray(b["x"] if isinstance(b, dict) else b).tolist()

ds = make(True)
if KIND == "remote_interleave":
    remote_inner.shared_workers(2)
    assert remote_inner.wait_started(60) is not None
    list(ds.take(2))  # (the next iterator opens its slots in the workers)
HERE = os.path.dirname(os.path.dirname(np.__file__))  # (not jaxfeed's: anything else)
PIPELINE = os.path.dirname(sys.modules["jaxfeed.pipeline"].__file__)
WAITS = ("threading.py", "queue.py", "connection.py", "selectors.py")

injected = [0]  # Ctrl-Cs sent: each must surface once

def interrupt_here(frame):
    injected[0] += 1
    sys.settrace(None)
    while frame is not None:
        frame.f_trace = None
        frame = frame.f_back
    _thread.interrupt_main(signal.SIGINT)  # (the handler runs at the next bytecode, as for a real signal)

def at_line(n):
    # Ctrl-C at the n-th line the step runs in jaxfeed's pipeline code
    count = [0]
    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == n:
                interrupt_here(frame)
                return None
        return local
    def glob(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(PIPELINE) else None
    return glob

def at_a_wait(n):
    # Ctrl-C in the n-th wait (a lock, a condition, a queue, a pipe) the step calls from jaxfeed's code
    count = [0]
    def glob(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(WAITS):
            f = frame.f_back
            while f is not None and f.f_code.co_filename.endswith(WAITS):
                f = f.f_back
            if f is not None and f.f_code.co_filename.startswith(PIPELINE):
                count[0] += 1
                if count[0] == n:
                    interrupt_here(frame)
        return None
    return glob

got, states, raised = [], [], 0
it = iter(ds)
got.append(key(next(it)))
for n in range(1, COUNT + 1):
    sys.settrace(at_line(1 + n * 7 % 40) if MODE == "line" else at_a_wait(1 + n % 3))
    b = None
    try:
        b = next(it)
        got.append(key(b))
        b = None
        sys.settrace(None)
        for _ in range(3):
            time.sleep(0.001)  # (a Ctrl-C that came too late for the step lands here)
    except KeyboardInterrupt:
        sys.settrace(None)
        raised += 1
        if b is not None:
            got.append(key(b))
        states.append((len(got), it.get_state()))
want_it = iter(make(False))
want = [key(next(want_it)) for _ in range(len(got) + 2)]
resumed = True
for k, state in states[:: max(1, len(states) // 4)]:
    again = iter(make(True))
    again.set_state(state)
    resumed &= [key(next(again)) for _ in range(2)] == want[k:k + 2]
print("injected", injected[0], "raised", raised, "same", got == want[:len(got)], "resumed", resumed, flush=True)
os._exit(0)  # (the workers go with the process)
"""


@pytest.mark.parametrize("kind", ["remote_interleave", "thread_interleave", "process_map"])
@pytest.mark.parametrize("mode", ["line", "wait"])
def test_ctrl_c_anywhere_in_a_step_leaves_the_stream_and_the_states_exact(tmp_path, kind, mode):
    script = tmp_path / "anywhere.py"
    script.write_text(_ANYWHERE)
    count = 24 if mode == "line" else 16
    done = subprocess.run([sys.executable, str(script), kind, mode, str(count)], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONFAULTHANDLER": "1",
                                            "TMPDIR": str(tmp_path)})  # (its os._exit leaves the forkserver's)
    out = done.stdout
    assert "same True resumed True" in out, (out, done.stderr[-3000:])
    injected, raised = int(out.split("injected ")[1].split()[0]), int(out.split("raised ")[1].split()[0])
    assert raised == injected, out  # every Ctrl-C surfaced, once
    # the signals did come: the steps run their lines whatever the machine's speed; a step waits only when the
    # consumer is ahead of its producers (the first steps, as a rule; on a loaded machine perhaps none)
    assert injected >= count // 2 or mode == "wait", out


_DISTRIBUTED = _COMMON + """
import jax
from jaxfeed import distribute as jd

hits = []

def double(x):
    if int(x) == 9 and not hits:  # Ctrl-C while the distributed iterator's step reads its pipeline
        hits.append(1)
        os.kill(os.getpid(), signal.SIGINT)
    return x * 2

strategy = jd.MirroredStrategy(jax.devices()[:2])

def local(b):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(b)]
ds = Dataset.range(24).map(double).batch(4)
hits.append(1)
want = [local(b) for b in strategy.experimental_distribute_dataset(ds)]
hits.clear()
got, where, state = consume(iter(strategy.experimental_distribute_dataset(ds)), local)
print("where", where, "same", got == want)
"""


def test_ctrl_c_inside_a_distributed_step_is_raised_when_it_returns(tmp_path):
    script = tmp_path / "distributed.py"
    script.write_text(_DISTRIBUTED)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert "where after the step same True" in done.stdout, (done.stdout, done.stderr[-3000:])
