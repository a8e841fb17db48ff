"""Every example a user may copy runs and exits cleanly: status 0, within a (generous) hang guard.

- Markdown: every ```python block of README.md and docs/*.md runs, in the order of its file, each in a
  fresh namespace, all blocks of one file in one process (a few processes in all, so the check stays fast).
  A block that is a fragment -- it uses names defined elsewhere, or ``...`` for code left out -- is marked
  by the line ``<!-- fragment -->`` right before its opening fence (invisible on the rendered page); every
  other block runs, so a new example is checked without anyone remembering to add it here.
- Scripts: every examples/*.py is listed below with short arguments, as a default-run check or, when it takes
  long, behind the ``slow`` marker; a script in none of the lists fails the test until it is added.

A failure names the block (file and line) and shows its output.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG_GUARD_S = 300  # only a hang takes this long
FRAGMENT_MARK = "<!-- fragment -->"

# examples/*.py: name -> arguments for a short run
SCRIPTS = {"train_mlp.py": ["--devices", "2", "--steps", "3"]}
SLOW_SCRIPTS = {
    "flax_optax_training.py": ["--devices", "2", "--steps", "3"],  # ~7 s of CPU: flax, optax, orbax imports
    "bench_distribute.py": ["--devices", "2", "--steps", "20", "--repeats", "1", "--feed-mb", "4"],
    "service_demo.py": ["--elements", "2000"],  # starts a local Ray instance
}
# optional extras a script needs: skipped (not failed) where they are not installed
NEEDS = {"flax_optax_training.py": ("flax", "optax", "orbax.checkpoint"), "service_demo.py": ("ray",)}
# run, several times over, by tests/test_tutorial_examples.py (which also checks their numbers)
COVERED_ELSEWHERE = {"custom_training_tutorial.py", "distributed_input_tutorial.py"}

BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)


def python_blocks(path):
    """[(line of the opening fence, code)] of the runnable ```python blocks of a Markdown file."""
    text = open(path, encoding="utf-8").read()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        if before == FRAGMENT_MARK:
            continue
        out.append((line, textwrap.dedent(m.group("code"))))
    return out


RUNNER = textwrap.dedent("""
    import json, sys, traceback
    for where, code in json.load(open(sys.argv[1])):
        print(f"=== {where}", flush=True)
        try:
            exec(compile(code, where, "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            print(f"=== FAILED {where}", flush=True)
            sys.exit(1)
""")


def run(cmd, what):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS")}
    try:
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{what}: still running after {HANG_GUARD_S}s (a hang, at exit or before)\n"
                    f"{(e.stdout or b'').decode(errors='replace')[-3000:]}")
    log = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"{what}: exit status {p.returncode}" + \
        (" (SIGABRT)" if p.returncode == -signal.SIGABRT else "") + f"\n{log[-4000:]}"
    assert "terminate called" not in log and "Exception ignored" not in log, log[-4000:]
    return log


MARKDOWN = [p for p in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
            if python_blocks(p)]  # (pages without a runnable block have nothing to check)


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_python_blocks_of_a_markdown_file_run_and_exit_cleanly(path, tmp_path):
    name = os.path.relpath(path, ROOT)
    blocks = [(f"{name}:{line}", code) for line, code in python_blocks(path)]
    listing = tmp_path / "blocks.json"
    listing.write_text(json.dumps(blocks))
    runner = tmp_path / "run_blocks.py"
    runner.write_text(RUNNER)
    log = run([sys.executable, str(runner), str(listing)], name)
    assert all(f"=== {where}" in log for where, _ in blocks)


def test_the_fragment_rule_skips_only_marked_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nprint(1)\n```\n\n<!-- fragment -->\n```python\nit = make()\n...\n```\n"
                    "- item:\n  ```python\n  x = 1\n  ```\n")
    assert python_blocks(str(page)) == [(3, "print(1)\n"), (13, "x = 1\n")]


def test_every_example_script_is_checked():
    scripts = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "examples", "*.py"))}
    unlisted = scripts - set(SCRIPTS) - set(SLOW_SCRIPTS) - COVERED_ELSEWHERE
    assert not unlisted, f"add {sorted(unlisted)} to SCRIPTS or SLOW_SCRIPTS in {__file__}"


def script_cases():
    cases = [pytest.param(name, args, id=name) for name, args in SCRIPTS.items()]
    cases += [pytest.param(name, args, id=name, marks=pytest.mark.slow) for name, args in SLOW_SCRIPTS.items()]
    return cases


@pytest.mark.parametrize("name,args", script_cases())
def test_an_example_script_runs_and_exits_cleanly(name, args):
    path = os.path.join(ROOT, "examples", name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is gone")
    for module in NEEDS.get(name, ()):
        pytest.importorskip(module)
    run([sys.executable, path, *args], name)
