"""Differential fuzzing of jaxfeed against tf.data: random pipeline programs (``fuzz_programs``) built by both,
compared element by element (the conformance goldens' encoding and rules, ``conformance_check``).

    /work/main/.venv/bin/python tests/conformance/fuzz_differential.py \\
        --tf-python /path/to/python-with-tensorflow --seed 1 --count 500

    # one program (text over t, np, F as in fuzz_programs), both sides, the differences:
    ... fuzz_differential.py --tf-python ... --program "t.Dataset.range(5).batch(2).unbatch()"

Each batch of programs runs first in a TensorFlow subprocess (``--tf-worker``: records each program as
``record_goldens.record_case`` does), then in a jaxfeed subprocess (``--jf-worker``: ``conformance_check``'s
``run_case`` and ``differences`` against that record). TensorFlow is never imported in a jaxfeed process.
A program that does not finish in ``--timeout`` seconds on a side is reported as hung there and the worker
restarts with the next one.

Accepted without a report (documented in README / docs/deliberate-differences.md): cardinality UNKNOWN
where TF knows it; element_spec less specific after a user function; an error tf.data finds by tracing
raised by jaxfeed (same class) when the spec is first needed or at iteration; a Python exception in a
function keeping its type (ValueError) where tf.data gives InvalidArgumentError; shuffled orders (multiset).

Findings are grouped by a signature (the first difference, numbers and values taken out) and each group's
smallest program is shown; ``--minimize`` shrinks it further by dropping transformations while the
signature stays.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fuzz_programs as fp  # noqa: E402  (numpy + stdlib only)


# =========================================================================================== the TF worker
def tf_worker(in_path, out_path, files_dir, timeout):
    import numpy as np

    import conformance_cases as cases
    import record_goldens as rg
    import tensorflow as tf

    plain_to_numpy = rg.to_numpy

    def to_numpy(x, limit):
        if isinstance(x, tf.RaggedTensor):
            return fp.Ragged(to_numpy(x.values, limit), x.row_splits.numpy())
        if isinstance(x, tf.SparseTensor):
            return fp.Sparse(x.indices.numpy(), x.values.numpy(), x.dense_shape.numpy())
        return plain_to_numpy(x, limit)

    rg.to_numpy = to_numpy
    plain_spec = rg.encode_spec_leaf

    def encode_spec_leaf(spec):
        if isinstance(spec, tf.RaggedTensorSpec):
            return {"t": "other", "repr": f"ragged {spec.dtype.name} rank {spec.shape.rank}"}
        return plain_spec(spec)

    rg.encode_spec_leaf = encode_spec_leaf
    t = rg.TFAdapter(cases.make_files(files_dir), tempfile.mkdtemp(prefix="fuzz_tf_"))
    _serve(in_path, out_path, timeout, lambda p: rg.record_case(_case(p, t), t, None), np)


# ====================================================================================== the jaxfeed worker
def jf_worker(in_path, tf_path, out_path, files_dir, timeout):
    import numpy as np

    import conformance_cases as cases
    import conformance_check as check
    import jaxfeed_adapter as ja
    from jaxfeed.pipeline import ragged as jr

    plain_to_numpy = ja.to_numpy

    def to_numpy(x, limit):
        if isinstance(x, jr.RaggedValue):
            return fp.Ragged(to_numpy(x.values, limit), np.asarray(x.row_splits))
        if isinstance(x, getattr(jr, "SparseValue", ())):
            return fp.Sparse(np.asarray(x.indices), np.asarray(x.values), np.asarray(x.dense_shape))
        return plain_to_numpy(x, limit)

    ja.to_numpy = to_numpy
    plain_spec = ja.encode_spec_leaf

    def encode_spec_leaf(spec):
        if isinstance(spec, jr.RaggedSpec):
            return {"t": "other", "repr": f"ragged {check.gf.dtype_name(spec.dtype)} rank "
                                          f"{None if spec.shape is None else len(spec.shape)}"}
        return plain_spec(spec)

    ja.encode_spec_leaf = encode_spec_leaf
    check.spec_may_be_looser = lambda c: c.loose
    golden = {}
    with open(tf_path) as f:
        for line in f:
            r = json.loads(line)
            golden[r["id"]] = r
    t = ja.JaxfeedAdapter(cases.make_files(files_dir), tempfile.mkdtemp(prefix="fuzz_jf_"))

    def one(p):
        g = golden.get(p["id"])
        if g is None or "record" not in g:
            return {"skipped": "no TF record" if g is None else g.get("hung") and "TF hung" or g.get("crash")}
        c = _case(p, t)
        o = check.run_case(c, t)
        diffs = check.differences(c, g["record"], o)
        return {"diffs": diffs, "accepted": _accepted(diffs, g["record"], o, c, ja, check),
                "jf": _summary(o.record)}

    _serve(in_path, out_path, timeout, one, np)


def _summary(r):
    if r.get("build_error"):
        return "build error " + r["build_error"]["message"][:160]
    out = f"{len(r['elements'])} elements, cardinality {r.get('cardinality')}"
    if r.get("iter_error"):
        out += f", then {r['iter_error']['message'][:160]}"
    return out


_DEFERRED = re.compile(r"^TF raises (\w+) when the dataset is built .*jaxfeed built it and raised (\w+) at (spec|iter)",
                       re.S)


def _accepted(diffs, golden, o, c, ja, check):
    """Move documented differences out of ``diffs`` (in place); return them with their reasons."""
    accepted = []
    keep = []
    for d in diffs:
        reason = None
        m = _DEFERRED.match(d)
        if m and c.loose:
            exc = next((o.exceptions[ph] for ph in ("spec", "cardinality", "iter") if ph in o.exceptions), None)
            if exc is not None and isinstance(exc, ja.expected_class(golden["build_error"]["class"])):
                reason = "error tf.data finds by tracing, raised at first use (README)"
        if d.startswith("cardinality -2,"):
            reason = "cardinality UNKNOWN where TF knows it"
        if d.startswith("iteration: raised") and "ValueError: bad element" in d and "InvalidArgumentError" in d:
            reason = "a Python exception in a function keeps its type (docs/deliberate-differences.md)"
        if reason:
            accepted.append(f"{reason}: {d[:200]}")
        else:
            keep.append(d)
    diffs[:] = keep
    return accepted


class _Case:
    def __init__(self, p, t):
        self.name = f"fuzz{p['id']}"
        self.group = "fuzz"
        text = p["text"]
        self.build = lambda t_, np_: fp.build(t_, text)
        self.limit = p.get("limit", 40)
        self.compare = p.get("compare", "exact")
        self.checkpoint = ()
        self.loose = p["loose"]


def _case(p, t):
    return _Case(p, t)


def _serve(in_path, out_path, timeout, run_one, np):
    """Run each program not yet in ``out_path``; a hang writes a record and exits 3 (the driver restarts)."""
    import warnings

    warnings.filterwarnings("ignore")
    with open(in_path) as f:
        programs = json.load(f)
    done = set()
    if os.path.exists(out_path):
        with open(out_path) as f:
            for line in f:
                done.add(json.loads(line)["id"])
    out = open(out_path, "a")
    lock = threading.Lock()

    for p in programs:
        if p["id"] in done:
            continue

        def hung(pid=p["id"]):
            with lock:
                out.write(json.dumps({"id": pid, "hung": True}) + "\n")
                out.flush()
            os._exit(3)

        watchdog = threading.Timer(timeout, hung)
        watchdog.start()
        try:
            result = {"id": p["id"], "record": run_one(p)} if "--tf-worker" in sys.argv else \
                {"id": p["id"], **run_one(p)}
        except BaseException as exc:  # noqa: BLE001 - the harness itself failed on this program
            result = {"id": p["id"], "crash": f"{type(exc).__name__}: {str(exc)[:300]}"}
        watchdog.cancel()
        with lock:
            out.write(json.dumps(result, default=repr) + "\n")
            out.flush()
    out.close()
    os._exit(0)


# ================================================================================================ the driver
def _run_worker(cmd, out_path, ids, label):
    """Run a worker until every id has a line in out_path (restarting after a hang or a crash)."""
    # the workers' scratch folders and TensorFlow's autograph files go under the driver's folder, removed at its
    # end (a worker ends by os._exit, and a hung one is killed: neither cleans up after itself)
    env = dict(os.environ, TMPDIR=os.path.join(os.path.dirname(out_path), "tmp"))
    os.makedirs(env["TMPDIR"], exist_ok=True)
    for _ in range(len(ids) + 3):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        done = set()
        if os.path.exists(out_path):
            with open(out_path) as f:
                for line in f:
                    try:
                        done.add(json.loads(line)["id"])
                    except ValueError:
                        pass
        if done >= set(ids):
            return
        if proc.returncode not in (0, 3):
            # a crash of the whole process on some program: mark the first missing one and go on
            missing = [i for i in ids if i not in done][0]
            with open(out_path, "a") as f:
                f.write(json.dumps({"id": missing, "crash": f"{label} process died rc={proc.returncode}: "
                                                            f"{proc.stderr[-500:]}"}) + "\n")
    raise RuntimeError(f"{label} worker made no progress")


def run_programs(programs, args, workdir):
    """programs: list of dicts with id, text, compare, loose. Returns id -> (tf line, jf line)."""
    in_path = os.path.join(workdir, "programs.json")
    tf_out = os.path.join(workdir, "tf.jsonl")
    jf_out = os.path.join(workdir, "jf.jsonl")
    for path in (tf_out, jf_out):
        if os.path.exists(path):
            os.remove(path)
    with open(in_path, "w") as f:
        json.dump(programs, f)
    files_dir = os.path.join(workdir, "files")
    me = os.path.abspath(__file__)
    ids = [p["id"] for p in programs]
    env_timeout = str(args.timeout)
    _run_worker([args.tf_python, me, "--tf-worker", in_path, tf_out, files_dir, env_timeout], tf_out, ids, "TF")
    _run_worker([sys.executable, me, "--jf-worker", in_path, tf_out, jf_out, files_dir, env_timeout], jf_out,
                ids, "jaxfeed")
    tf_lines, jf_lines = {}, {}
    with open(tf_out) as f:
        for line in f:
            r = json.loads(line)
            tf_lines[r["id"]] = r
    with open(jf_out) as f:
        for line in f:
            r = json.loads(line)
            jf_lines[r["id"]] = r
    return {i: (tf_lines.get(i), jf_lines.get(i)) for i in ids}


def _tf_summary(line):
    if line is None:
        return "no record"
    if line.get("hung"):
        return "hung"
    if "crash" in line:
        return "harness crash " + line["crash"]
    r = line["record"]
    if r["build_error"]:
        return f"build error {r['build_error']['tf_class']}: {r['build_error']['message'][:160]}"
    out = f"{len(r['elements'])} elements, cardinality {r['cardinality']}"
    if r.get("iter_error"):
        out += f", then {r['iter_error']['tf_class']}: {r['iter_error']['message'][:160]}"
    return out


def signature(diff: str) -> str:
    s = re.sub(r"\(['\"].*", "", diff)  # messages
    s = re.sub(r"= .*?(,|$)", "=V\\1", s)
    s = re.sub(r"\[[^\[\]]*\]", "[]", s)
    s = re.sub(r"\[[^\[\]]*\]", "[]", s)
    s = re.sub(r"-?\d+", "N", s)
    return s[:140]


def findings_of(tf_line, jf_line):
    """(list of difference lines, list of accepted lines); a hang or crash on one side is a difference."""
    if tf_line is None or jf_line is None:
        return ["missing result"], []
    if tf_line.get("hung") and jf_line.get("skipped"):
        return [], ["tf.data hung"]
    if jf_line.get("hung"):
        return ["jaxfeed hung (did not finish within the timeout)"], []
    if "crash" in jf_line:
        return [f"harness crash on the jaxfeed side: {jf_line['crash']}"], []
    if "crash" in tf_line:
        return [], [f"TF side harness crash: {tf_line['crash'][:200]}"]
    if jf_line.get("skipped"):
        return [], [f"skipped: {jf_line['skipped']}"]
    return jf_line["diffs"], jf_line["accepted"]


def make_program(pid, text, compare, limit):
    import re as _re

    user_functions = _re.compile(r"\.(map|flat_map|interleave|scan|filter|take_while|group_by_window|"
                                 r"bucket_by_sequence_length|apply)\(|from_generator")
    return {"id": pid, "text": text, "compare": compare, "limit": limit,
            "loose": bool(user_functions.search(text))}


def minimize(prog, sig, args, workdir, rounds=8):
    """Drop transformations (one at a time, all candidates in one batch) while the signature stays."""
    best = prog
    for _ in range(rounds):
        cands = []
        for i in range(len(best["ops"])):
            ops = best["ops"][:i] + best["ops"][i + 1:]
            cands.append({"source": best["source"], "ops": ops, "compare": best["compare"]})
        if not cands:
            break
        programs = [make_program(k, fp.text_of(c), c["compare"], args.limit) for k, c in enumerate(cands)]
        results = run_programs(programs, args, workdir)
        found = None
        for k, c in enumerate(cands):
            diffs, _ = findings_of(*results[k])
            if diffs and signature(diffs[0]) == sig:
                found = c
                break
        if found is None:
            break
        best = found
    return best


def main(argv=None):
    if len(sys.argv) > 1 and sys.argv[1] == "--tf-worker":
        tf_worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--jf-worker":
        jf_worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tf-python", required=True, help="a Python with tensorflow (and numpy)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--batch", type=int, default=250, help="programs per worker process")
    ap.add_argument("--limit", type=int, default=40, help="elements compared per program")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per program and side")
    ap.add_argument("--program", action="append", help="run this program text instead of random ones")
    ap.add_argument("--minimize", action="store_true", help="shrink each finding's program")
    ap.add_argument("--show-accepted", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every program's outcome")
    ap.add_argument("--json", help="write the findings here")
    args = ap.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="fuzz_differential_")
    atexit.register(shutil.rmtree, workdir, True)  # (the workers' scratch folders are under it: _run_worker)
    if args.program:
        progs = [{"source": text, "ops": [], "compare": "exact"} for text in args.program]
    else:
        rng = random.Random(args.seed)
        progs = [fp.generate(rng) for _ in range(args.count)]
    groups: dict = {}
    accepted_count: dict = {}
    start = time.time()
    n_ok = 0
    for b0 in range(0, len(progs), args.batch):
        chunk = progs[b0:b0 + args.batch]
        programs = [make_program(b0 + k, fp.text_of(p), p["compare"], args.limit) for k, p in enumerate(chunk)]
        results = run_programs(programs, args, workdir)
        for k, p in enumerate(chunk):
            pid = b0 + k
            tf_line, jf_line = results[pid]
            diffs, accepted = findings_of(tf_line, jf_line)
            for a in accepted:
                key = a.split(":")[0]
                accepted_count[key] = accepted_count.get(key, 0) + 1
                if args.show_accepted:
                    print(f"  accepted #{pid}: {a}")
            if args.verbose or args.program:
                print(f"#{pid}: {fp.text_of(p)}\n   TF:      {_tf_summary(tf_line)}\n   jaxfeed: "
                      f"{(jf_line or {}).get('jf', jf_line)}")
                for d in diffs:
                    print(f"   DIFF {d}")
            if not diffs:
                n_ok += 1
                continue
            sig = signature(diffs[0])
            g = groups.setdefault(sig, {"count": 0, "programs": []})
            g["count"] += 1
            g["programs"].append({"id": pid, "prog": p, "text": fp.text_of(p), "diffs": diffs,
                                  "tf": _tf_summary(tf_line), "jf": (jf_line or {}).get("jf")})
        print(f"[{min(b0 + args.batch, len(progs))}/{len(progs)} programs, {time.time() - start:.0f} s, "
              f"{len(groups)} finding groups]", flush=True)

    print(f"\n{len(progs)} programs: {n_ok} agree, {len(progs) - n_ok} differ in {len(groups)} groups")
    for key, n in sorted(accepted_count.items(), key=lambda kv: -kv[1]):
        print(f"  accepted ({n}): {key}")
    report = []
    for sig, g in sorted(groups.items(), key=lambda kv: -kv[1]["count"]):
        smallest = min(g["programs"], key=lambda r: (len(r["prog"]["ops"]), len(r["text"])))
        if args.minimize and not args.program:
            os.makedirs(os.path.join(workdir, "min"), exist_ok=True)
            small = minimize(smallest["prog"], sig, args, os.path.join(workdir, "min"))
            smallest = dict(smallest, prog=small, text=fp.text_of(small))
        print(f"\n=== {g['count']} program(s): {sig}\n  program: {smallest['text']}\n  TF:      {smallest['tf']}"
              f"\n  jaxfeed: {smallest['jf']}")
        for d in smallest["diffs"][:4]:
            print(f"  - {d}")
        report.append({"signature": sig, "count": g["count"], "example": smallest["text"],
                       "diffs": smallest["diffs"], "tf": smallest["tf"], "jaxfeed": smallest["jf"],
                       "ids": [r["id"] for r in g["programs"]][:20]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
