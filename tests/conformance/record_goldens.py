"""Record the conformance goldens from tf.data. Needs TensorFlow, which is never a jaxfeed dependency:

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu numpy
    /work/tfvenv/bin/python tests/conformance/record_goldens.py [--only NAME ...]

Runs every case of ``conformance_cases`` with tf.data (through ``TFAdapter``) and writes
``goldens/<group>.json``: for each case the build error, or the element_spec, cardinality, the elements
(as ``golden_format`` encodes them), the error iteration ended with, and for checkpoint cases what comes
after a save/restore at each step count. ``test_conformance.py`` replays the same cases on jaxfeed.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import re
import sys
import tempfile
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import conformance_cases as cases  # noqa: E402
import golden_format as gf  # noqa: E402

GOLDENS = os.path.join(HERE, "goldens")
FILES_DIR = None  # where make_files wrote the inputs; shown as <files> in messages so goldens are stable


class TFOps:
    """The operations case functions use, as TensorFlow ops (traced once by tf.data)."""

    @staticmethod
    def fill(shape, value):
        return tf.fill(shape, value)

    @staticmethod
    def zeros(n, dtype):
        return tf.zeros([n], dtype)

    @staticmethod
    def cast(x, dtype):
        return tf.cast(x, dtype)

    @staticmethod
    def shape0(x):
        return tf.shape(x)[0]

    @staticmethod
    def size(x):
        return tf.size(x)

    @staticmethod
    def size_bytes(s):
        """The length in bytes of a string scalar (int32)."""
        return tf.strings.length(s)

    @staticmethod
    def arange(n):
        return tf.range(n)

    @staticmethod
    def reduce_sum(x):
        return tf.reduce_sum(x)

    @staticmethod
    def stack(values):
        return tf.stack(values)

    @staticmethod
    def py_raise(x, bad):
        """``x``, except that the element equal to ``bad`` raises ValueError in Python."""

        def check(v):
            if v == bad:
                raise ValueError(f"bad element {v}")
            return v

        return tf.reshape(tf.numpy_function(check, [x], x.dtype, stateful=False), [])


class TFAdapter:
    def __init__(self, files, scratch):
        self.Dataset = tf.data.Dataset
        self.TFRecordDataset = tf.data.TFRecordDataset
        self.TextLineDataset = tf.data.TextLineDataset
        self.FixedLengthRecordDataset = tf.data.FixedLengthRecordDataset
        self.CsvDataset = tf.data.experimental.CsvDataset
        self.AUTOTUNE = tf.data.AUTOTUNE
        self.INFINITE = int(tf.data.INFINITE_CARDINALITY)
        self.UNKNOWN = int(tf.data.UNKNOWN_CARDINALITY)
        self.ops = TFOps
        self.files = files
        self.experimental = tf.data.experimental
        self._scratch = scratch
        self._made = 0

    def scratch(self):
        self._made += 1
        path = os.path.join(self._scratch, f"scratch{self._made}")
        os.makedirs(path)
        return path

    @staticmethod
    def dtype(name):
        return tf.as_dtype(name)

    @staticmethod
    def spec(shape, dtype):
        return tf.TensorSpec(shape, tf.as_dtype(dtype))


# ------------------------------------------------------------------------------------------- encoding
def to_numpy(x, limit):
    if isinstance(x, tf.data.Dataset):
        return gf.DatasetValue([to_numpy(e, limit) for e in x.take(limit)])
    if gf.is_namedtuple(x):
        return type(x)(*[to_numpy(v, limit) for v in x])
    if isinstance(x, tuple):
        return tuple(to_numpy(v, limit) for v in x)
    if isinstance(x, dict):
        return {k: to_numpy(v, limit) for k, v in x.items()}
    if isinstance(x, tf.Tensor):
        return x.numpy()
    return x


def encode_spec_leaf(spec):
    if isinstance(spec, tf.TensorSpec):
        shape = None if spec.shape.rank is None else spec.shape.as_list()
        return {"t": "tensor", "shape": shape, "dtype": spec.dtype.name}
    if isinstance(spec, tf.data.DatasetSpec):
        return {"t": "dataset_spec", "spec": gf.encode_nest(spec.element_spec, encode_spec_leaf)}
    return {"t": "other", "repr": repr(spec)}


def classify(exc: BaseException) -> tuple[str, str]:
    """(expected jaxfeed class name, TF class name): tf.errors.X -> jaxfeed.pipeline.errors.X (same names);
    a Python exception -> its nearest built-in class."""
    tf_name = type(exc).__name__
    if isinstance(exc, tf.errors.OpError):
        return tf_name, tf_name
    for klass in type(exc).__mro__:
        if getattr(builtins, klass.__name__, None) is klass:
            return klass.__name__, tf_name
    return "Exception", tf_name


def error(exc, phase, after):
    name, tf_name = classify(exc)
    # TF prefixes kernel errors with the function node's name: noise for a reader of the golden
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(exc)).replace(" [Op:IteratorGetNext] name: ", "")
    message = re.sub(r"(MapDataset):\d+", r"\1", message)
    if FILES_DIR:
        message = message.replace(FILES_DIR, "<files>")
    return gf.error_record(message, phase, after, name, tf_name)


def iterate(ds, limit):
    elements, failure = [], None
    it = iter(ds)
    while len(elements) < limit:
        try:
            e = next(it)
        except StopIteration:
            return elements, None, True
        except Exception as exc:  # noqa: BLE001 - the golden records whatever tf.data raised
            return elements, error(exc, "iter", len(elements)), True
        elements.append(gf.encode_element(to_numpy(e, limit)))
    return elements, failure, False


def record_checkpoint(c, t, steps, tmp):
    ds = c.build(t, np)
    it = iter(ds)
    taken = 0
    try:
        for _ in range(steps):
            next(it)
            taken += 1
    except StopIteration:
        pass
    try:
        path = tf.train.Checkpoint(iterator=it).write(os.path.join(tmp, f"{c.name}_{steps}"))
    except Exception as exc:  # noqa: BLE001
        return {"steps": steps, "error": error(exc, "save", taken)}
    ds2 = c.build(t, np)
    it2 = iter(ds2)
    tf.train.Checkpoint(iterator=it2).read(path).assert_consumed()
    rest = []
    try:
        while len(rest) < c.limit:
            rest.append(gf.encode_element(to_numpy(next(it2), c.limit)))
    except StopIteration:
        pass
    except Exception as exc:  # noqa: BLE001
        return {"steps": steps, "rest": rest, "error": error(exc, "iter", len(rest))}
    return {"steps": steps, "rest": rest, "error": None}


def record_case(c, t, tmp):
    out = {"name": c.name, "group": c.group, "compare": c.compare, "limit": c.limit}
    try:
        ds = c.build(t, np)
    except Exception as exc:  # noqa: BLE001
        out["build_error"] = error(exc, "build", 0)
        return out
    out["build_error"] = None
    out["spec"] = gf.encode_nest(ds.element_spec, encode_spec_leaf)
    out["cardinality"] = int(ds.cardinality())
    out["elements"], out["iter_error"], out["complete"] = iterate(ds, c.limit)
    if c.checkpoint:
        out["checkpoints"] = [record_checkpoint(c, t, n, tmp) for n in c.checkpoint]
    return out


CASE_TIMEOUT_S = 120


def _hung(name):
    print(f"case {name} did not finish in {CASE_TIMEOUT_S} s (does tf.data hang on it?); nothing written",
          flush=True)
    os._exit(3)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="record only these cases (merged into the existing files)")
    args = parser.parse_args(argv)
    os.makedirs(GOLDENS, exist_ok=True)
    global FILES_DIR
    with tempfile.TemporaryDirectory() as tmp:
        FILES_DIR = os.path.join(tmp, "files")
        t = TFAdapter(cases.make_files(FILES_DIR), tmp)
        groups: dict[str, dict] = {}
        for c in cases.CASES:
            if args.only and c.name not in args.only:
                continue
            # tf.data can hang on a case (ignore_errors over a missing file retries it forever): name it
            watchdog = threading.Timer(CASE_TIMEOUT_S, _hung, (c.name,))
            watchdog.start()
            try:
                record = record_case(c, t, tmp)
            finally:
                watchdog.cancel()
            groups.setdefault(c.group, {})[c.name] = record
            state = record["build_error"] and "build error " + record["build_error"]["class"] or (
                f"{len(record['elements'])} elements" + (f", then {record['iter_error']['class']}"
                                                         if record.get("iter_error") else ""))
            print(f"{c.group:16s} {c.name:45s} {state}", flush=True)
    for group, records in groups.items():
        path = os.path.join(GOLDENS, f"{group}.json")
        existing = {}
        if args.only and os.path.exists(path):
            with open(path) as f:
                existing = json.load(f)["cases"]
        existing.update(records)
        order = [c.name for c in cases.CASES if c.name in existing]
        # one case per line: a re-recording's diff shows which cases changed
        lines = [f"{json.dumps(name)}: {json.dumps(existing[name], separators=(',', ':'))}" for name in order]
        recorded_with = json.dumps(f"tensorflow {tf.__version__}, numpy {np.__version__}")
        with open(path, "w") as f:
            f.write(f'{{"recorded_with": {recorded_with},\n "cases": {{\n' + ",\n".join(lines) + "\n}}\n")
    print(f"{sum(len(r) for r in groups.values())} cases recorded in {len(groups)} files", flush=True)


if __name__ == "__main__":
    main()
