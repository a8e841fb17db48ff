"""The TensorFlow side of tests/formats/fuzz_formats_differential.py. Run by a Python that has
``tensorflow-cpu`` (never by jaxfeed's): ``python fuzz_formats_tf_worker.py cases.json results.json``.
Each case is executed with real TensorFlow and its result normalised with fuzz_formats_common. Not a pytest
module."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fuzz_formats_common import dec, norm_array, norm_error, norm_sparse  # noqa: E402

tf.get_logger().setLevel("ERROR")
DT = {"int64": tf.int64, "float32": tf.float32, "string": tf.string, "int32": tf.int32, "float64": tf.float64}
MAX_ELEMS = 5000


def tf_spec(s):
    kind = s[0]
    if kind == "fixed":
        _, shape, dtype, default = s
        return tf.io.FixedLenFeature(shape, DT[dtype], default_value=default)
    if kind == "varlen":
        return tf.io.VarLenFeature(DT[s[1]])
    if kind == "fixedseq":
        _, shape, dtype, allow_missing, default = s
        return tf.io.FixedLenSequenceFeature(shape, DT[dtype], allow_missing=allow_missing, default_value=default)
    raise ValueError(kind)


def norm_value(v):
    if isinstance(v, tf.SparseTensor):
        return norm_sparse(v.indices.numpy(), v.values.numpy(), v.dense_shape.numpy())
    if isinstance(v, tf.RaggedTensor):
        return {"ragged": True, "values": norm_array(v.flat_values.numpy()),
                "splits": [norm_array(s.numpy()) for s in v.nested_row_splits]}
    return norm_array(v.numpy())


def norm_dict(d):
    return {k: norm_value(v) for k, v in d.items()}


def run_example(c):
    specs = {name: tf_spec(s) for name, s in c["features"]}
    if c["mode"] == "batch":
        out = tf.io.parse_example(tf.constant(c["records"], dtype=tf.string, shape=[len(c["records"])]), specs)
    else:
        out = tf.io.parse_single_example(tf.constant(c["records"][0], dtype=tf.string), specs)
    return {"ok": norm_dict(out)}


def run_seqex(c):
    ctx = {name: tf_spec(s) for name, s in c["context"]}
    seq = {name: tf_spec(s) for name, s in c["sequence"]}
    if c["mode"] == "batch":
        a, b, lens = tf.io.parse_sequence_example(
            tf.constant(c["records"], dtype=tf.string, shape=[len(c["records"])]), ctx, seq)
        return {"ok": {"context": norm_dict(a), "sequence": norm_dict(b), "lengths": norm_dict(lens)}}
    a, b = tf.io.parse_single_sequence_example(tf.constant(c["records"][0], dtype=tf.string), ctx, seq)
    return {"ok": {"context": norm_dict(a), "sequence": norm_dict(b)}}


def iterate(ds):
    elems = []
    try:
        it = iter(ds)
        while len(elems) < MAX_ELEMS:
            try:
                e = next(it)
            except StopIteration:
                break
            if isinstance(e, tuple):
                elems.append([norm_array(x.numpy()) for x in e])
            else:
                elems.append(norm_array(e.numpy()))
        return {"elems": elems, "end": None}
    except Exception as e:  # noqa: BLE001
        return {"elems": elems, "end": norm_error(e)}


def csv_default(d):
    if "v" not in d:
        return DT[d["t"]]
    v = d["v"]
    t = tf.constant([v] if d.get("list") else v, dtype=DT[d["t"]])
    return t


def run_csv(c):
    defaults = [csv_default(d) for d in c["defaults"]]
    ds = tf.data.experimental.CsvDataset(c["paths"], defaults, compression_type=c["compression"] or None,
                                         buffer_size=c.get("buffer_size"), header=c["header"],
                                         field_delim=c["field_delim"], use_quote_delim=c["use_quote_delim"],
                                         na_value=c["na_value"], select_cols=c.get("select_cols"))
    return iterate(ds)


def run_text(c):
    return iterate(tf.data.TextLineDataset(c["paths"], compression_type=c["compression"] or None,
                                           buffer_size=c.get("buffer_size"),
                                           num_parallel_reads=c.get("num_parallel_reads")))


def run_fixedlen(c):
    return iterate(tf.data.FixedLengthRecordDataset(
        c["paths"], c["record_bytes"], header_bytes=c["header_bytes"], footer_bytes=c["footer_bytes"],
        buffer_size=c.get("buffer_size"), compression_type=c["compression"] or None))


def run_tfrecord(c):
    out = {}
    if c.get("tf_write_path"):
        with tf.io.TFRecordWriter(c["tf_write_path"], options=tf.io.TFRecordOptions(c["compression"])) as w:
            for r in c["records"]:
                w.write(r)
    for key, paths in c["reads"].items():
        out[key] = iterate(tf.data.TFRecordDataset(paths, compression_type=c["compression"] or None,
                                                   buffer_size=c.get("buffer_size"),
                                                   num_parallel_reads=c.get("num_parallel_reads")))
    return out


RUN = {"example": run_example, "seqex": run_seqex, "csv": run_csv, "text": run_text, "fixedlen": run_fixedlen,
       "tfrecord": run_tfrecord}


def main():
    cases = dec(json.load(open(sys.argv[1])))
    start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    # one JSON line per case, flushed: if TF itself crashes, the driver knows which case did it
    with open(sys.argv[2], "a") as f:
        for c in cases[start:]:
            try:
                r = RUN[c["kind"]](c)
            except Exception as e:  # noqa: BLE001
                r = {"raised": norm_error(e)}
            f.write(json.dumps(r) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
