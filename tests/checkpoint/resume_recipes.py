"""Random pipelines as plain data ("recipes"), so that a test and a subprocess build the same graph.

A recipe is ``{"source": [name, params], "ops": [[name, params], ...], "dir": temp dir}``: JSON, built by
the hypothesis strategy ``recipes()`` and turned into a Dataset by ``build(recipe)``. Which
transformations are drawn is decided when this module is imported, from what exists in the tree:
``available()`` checks for each node or reader module, so transformations that land later get covered
without editing this file (their builders are written against the tf.data signatures in dataset.py).

Every function a pipeline calls is defined at module level: the graph fingerprint (which a restore
checks) covers function bytecode and names, and a subprocess importing this module gets the same ones.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

from jaxfeed.pipeline import Dataset, structure

MAX_ELEMENTS = 60


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _node(name):
    return _exists(f"jaxfeed.pipeline.nodes.{name}")


def _works(make) -> bool:
    """Whether a transformation is usable yet (its node and iterator modules have landed): build and run a
    tiny pipeline. Missing pieces show as ImportError / AttributeError / NotImplementedError; any other
    error counts as present, so that a bug fails the property test instead of hiding the op."""
    try:
        list(make())
    except (ImportError, AttributeError, NotImplementedError):
        return False
    except Exception:  # noqa: BLE001
        return True
    return True


PROBE_PARAMS = {"batch": {"size": 2, "drop": False}, "batch_parallel": {"size": 2, "drop": False},
                "padded_batch": {"size": 2, "drop": False}, "map_rng": {"seed": 1, "par": None},
                "interleave": {"block": 1}, "interleave_parallel": {"block": 1},
                "shuffle": {"buffer": 2, "seed": 1, "reshuffle": True}, "take": {"count": 2},
                "skip": {"count": 1}, "shard": {"num": 2, "index": 0}, "window": {"shift": 1, "drop": False},
                "prefetch": {"buffer": 1}, "sample": {"seed": 1}}


# --------------------------------------------------------------------------------- element functions
def _bump_leaf(x):
    if isinstance(x, bytes):
        return x + b"!"
    arr = np.asarray(x)
    if arr.dtype == object:
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [v + b"!" for v in arr.reshape(-1).tolist()]
        return out
    if arr.dtype == bool:
        return ~x
    return x + arr.dtype.type(1)


def _element(args):
    return args[0] if len(args) == 1 else tuple(args)


def bump(*args):
    """A pure map: every numeric leaf + 1, every string leaf + b'!' (works batched too)."""
    return structure.map_structure(_bump_leaf, _element(args))


def bump_with_rng(*args):
    """A random map (``with_rng=True``): numeric leaves + a draw from the per-element generator."""
    *element, rng = args
    k = int(rng.integers(0, 10))

    def leaf(x):
        arr = np.asarray(x)
        if isinstance(x, bytes) or arr.dtype == object or arr.dtype == bool:
            return _bump_leaf(x)
        return x + arr.dtype.type(k)
    return structure.map_structure(leaf, _element(element))


def _key(e) -> int:
    first = structure.flatten(e)[0]
    if isinstance(first, bytes):
        return len(first)
    arr = np.asarray(first)
    if arr.dtype == object:
        return sum(len(v) for v in arr.reshape(-1).tolist())
    return int(np.sum(arr.astype(np.int64)))


def keep(*args):
    """A pure predicate: drop elements whose first leaf sums to a multiple of 3."""
    return _key(_element(args)) % 3 != 0


def twice(*args):
    return Dataset.from_tensors(_element(args)).repeat(2)


def thrice(*args):
    return Dataset.from_tensors(_element(args)).repeat(3)


def window_back(*args):
    """flat_map over windows: a window of a nested element is a nest of datasets; zip them back."""
    w = _element(args)
    return w if hasattr(w, "_node") else Dataset.zip(w)


def small(*args):
    """take_while's predicate."""
    return _key(_element(args)) < 40


def explode(*args):
    """A map that fails on some elements (ignore_errors skips them; saved states hold the failures)."""
    e = _element(args)
    if _key(e) % 4 == 3 and not _probing_spec():
        raise ValueError(f"element with key {_key(e)} is unlucky")
    return e


def _probing_spec() -> bool:
    """Whether map is running the function once to find its element spec (an error there would fail the
    pipeline's construction, not one element)."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "spec_from_function":
            return True
        frame = frame.f_back
    return False


def key_of(*args):
    return np.int64(_key(_element(args)) % 5)


def running_count(state, element):
    """scan: count elements, emit (count, element)."""
    return state + np.int64(1), (state, element)


def parity(*args):
    return np.int64(_key(_element(args)) % 2)


def pairs(key, window):
    return window.batch(2)


def generate(n):
    def gen():
        for i in range(n):
            yield np.int64(i), np.float32(i) / 2
    return gen


# --------------------------------------------------------------------------------- files
def _write_once(path: str, data: bytes) -> None:
    """Write a file unless it is already there (atomically: a reader never sees a partial file)."""
    if os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def write_files(directory: str) -> dict:
    """Two TFRecord files and two text files of a few records each (same content every time)."""
    os.makedirs(directory, exist_ok=True)
    paths = {"text": [], "tfrecord": []}
    for f in range(2):
        p = os.path.join(directory, f"lines-{f}.txt")
        _write_once(p, b"".join(b"line-%d-%d\n" % (f, i) for i in range(5 + f)))
        paths["text"].append(p)
    if _exists("jaxfeed.formats.tfrecord"):
        from jaxfeed.formats.tfrecord import frame_many

        for f in range(2):
            p = os.path.join(directory, f"records-{f}.tfrecord")
            _write_once(p, frame_many([b"rec-%d-%d" % (f, i) * (i + 1) for i in range(4 + f)]))
            paths["tfrecord"].append(p)
    return paths


# --------------------------------------------------------------------------------- sources
def _src_range(p, d):
    return Dataset.range(p["n"])


def _src_slices(p, d):
    n = p["n"]
    return Dataset.from_tensor_slices(({"a": np.arange(n, dtype=np.int64),
                                        "b": np.arange(2 * n, dtype=np.float32).reshape(n, 2)},
                                       (np.arange(n) % 3).astype(np.int32)))


def _src_text(p, d):
    from jaxfeed.formats.text import TextLineDataset

    return TextLineDataset(sorted(write_files(d)["text"]))


def _src_tfrecord(p, d):
    from jaxfeed.formats.tfrecord_dataset import TFRecordDataset

    return TFRecordDataset(sorted(write_files(d)["tfrecord"]))


def _src_generator(p, d):
    from jaxfeed.pipeline import TensorSpec

    # the generator yields the same sequence at every call: declared replayable, so its state can be saved
    return Dataset.from_generator(generate(p["n"]), output_signature=(TensorSpec((), np.int64),
                                                                      TensorSpec((), np.float32)),
                                  replayable=True)


def _src_list_files(p, d):
    from jaxfeed.formats.text import TextLineDataset

    write_files(d)
    return Dataset.list_files(os.path.join(d, "lines-*.txt"), shuffle=False).interleave(
        TextLineDataset, cycle_length=2, block_length=1)


SOURCES = {
    "range": (lambda: True, _src_range),
    "slices": (lambda: True, _src_slices),
    "text": (lambda: _exists("jaxfeed.formats.text"), _src_text),
    "tfrecord": (lambda: _exists("jaxfeed.formats.tfrecord_dataset"), _src_tfrecord),
    "generator": (lambda: _works(lambda: _src_generator({"n": 2}, "")), _src_generator),
    "list_files": (lambda: _node("list_files") and _node("interleave") and _exists("jaxfeed.formats.text"),
                   _src_list_files),
}


# --------------------------------------------------------------------------------- transformations
# name -> (available, needs elements of one shape, makes shapes differ, apply(ds, params))
OPS = {
    "map": (lambda: True, False, False, lambda ds, p: ds.map(bump)),
    "map_parallel": (lambda: True, False, False, lambda ds, p: ds.map(bump, num_parallel_calls=2)),
    "map_rng": (lambda: True, False, False,
                lambda ds, p: ds.map(bump_with_rng, num_parallel_calls=p["par"], with_rng=True, seed=p["seed"])),
    "filter": (lambda: _node("filter"), False, False, lambda ds, p: ds.filter(keep)),
    "flat_map": (lambda: _node("flat_map"), False, False, lambda ds, p: ds.flat_map(twice)),
    "interleave": (lambda: _node("interleave"), False, False,
                   lambda ds, p: ds.interleave(thrice, cycle_length=2, block_length=p["block"])),
    "interleave_parallel": (lambda: _node("interleave"), False, False,
                            lambda ds, p: ds.interleave(thrice, cycle_length=2, block_length=p["block"],
                                                        num_parallel_calls=2)),
    "batch": (lambda: True, True, True, lambda ds, p: ds.batch(p["size"], drop_remainder=p["drop"])),
    "batch_parallel": (lambda: True, True, True,
                       lambda ds, p: ds.batch(p["size"], drop_remainder=p["drop"], num_parallel_calls=2)),
    "padded_batch": (lambda: _node("padded_batch"), False, True,
                     lambda ds, p: ds.padded_batch(p["size"], drop_remainder=p["drop"])),
    "unbatch": (lambda: _node("unbatch"), False, False, None),  # only after a batch: see recipes()
    "rebatch": (lambda: _node("rebatch"), False, True, None),
    "shuffle": (lambda: True, False, False,
                lambda ds, p: ds.shuffle(p["buffer"], seed=p["seed"], reshuffle_each_iteration=p["reshuffle"])),
    "repeat": (lambda: True, False, False, lambda ds, p: ds.repeat(2)),
    "take": (lambda: True, False, False, lambda ds, p: ds.take(p["count"])),
    "skip": (lambda: True, False, False, lambda ds, p: ds.skip(p["count"])),
    "shard": (lambda: True, False, False, lambda ds, p: ds.shard(p["num"], p["index"])),
    "enumerate": (lambda: _node("zip"), False, False, lambda ds, p: ds.enumerate(start=3)),
    "window": (lambda: _node("window") and _node("flat_map") and _node("zip"), False, False,
               lambda ds, p: ds.window(3, shift=p["shift"], drop_remainder=p["drop"]).flat_map(window_back)),
    "cache": (lambda: _node("cache"), False, False, lambda ds, p: ds.cache()),
    "prefetch": (lambda: True, False, False, lambda ds, p: ds.prefetch(p["buffer"])),
    "zip": (lambda: _node("zip"), False, False, lambda ds, p: Dataset.zip((ds, Dataset.range(100)))),
    "concatenate": (lambda: _node("concatenate"), False, False, lambda ds, p: ds.concatenate(ds.take(3))),
    "sample": (lambda: _node("sample"), False, False,
               lambda ds, p: Dataset.sample_from_datasets([ds, ds.map(bump)], seed=p["seed"])),
    "choose": (lambda: _node("sample"), False, False,
               lambda ds, p: Dataset.choose_from_datasets([ds, ds.map(bump)], Dataset.range(2).repeat(30))),
    "take_while": (lambda: _node("take_while"), False, False, lambda ds, p: ds.take_while(small)),
    "ignore_errors": (lambda: _node("ignore_errors"), False, False,
                      lambda ds, p: ds.map(explode, num_parallel_calls=p.get("par")).ignore_errors()),
    "unique": (lambda: _node("unique"), False, False, lambda ds, p: ds.map(key_of).unique()),
    "scan": (lambda: _node("scan"), False, False, lambda ds, p: ds.scan(np.int64(0), running_count)),
    "group_by_window": (lambda: _node("group_by_window"), True, True,
                        lambda ds, p: ds.group_by_window(parity, pairs, window_size=2)),
}


def _apply(ds, name, p):
    if name == "unbatch":
        return ds.unbatch()
    if name == "rebatch":
        return ds.rebatch(p["size"], drop_remainder=p["drop"])
    return OPS[name][3](ds, p)


@functools.lru_cache(maxsize=None)
def available_sources() -> list[str]:
    return [name for name, (ok, _) in SOURCES.items() if ok()]


@functools.lru_cache(maxsize=None)
def available_ops() -> list[str]:
    """Transformations whose node module exists and that run on a tiny pipeline."""
    return [name for name, (ok, *_rest) in OPS.items() if ok() and (name in ("unbatch", "rebatch") or _works(
        lambda: _apply(Dataset.range(4), name, PROBE_PARAMS.get(name, {}))))]


def build(recipe) -> Dataset:
    name, params = recipe["source"]
    ds = SOURCES[name][1](params, recipe.get("dir", ""))
    for op, p in recipe["ops"]:
        ds = _apply(ds, op, p)
    return ds


# --------------------------------------------------------------------------------- strategy
def recipes(directory: str, max_ops: int = 5, ops: list[str] | None = None, require: str | None = None):
    """A hypothesis strategy of recipes over the transformations that exist now."""
    from hypothesis import strategies as st

    names = list(ops if ops is not None else available_ops())
    sources = list(available_sources())  # cached: hypothesis needs the same choices for every example

    @st.composite
    def draw_recipe(draw):
        source = draw(st.sampled_from(sources))
        steps = []
        ragged = False   # element shapes may differ (no plain batch)
        rows: list[bool] = []  # per batch level: were the rows ragged (what unbatch gives back)
        count = draw(st.integers(0 if require is None else 1, max_ops))
        at = None if require is None else draw(st.integers(0, count - 1))
        placed = require is None
        step = -1
        while step + 1 < count:
            step += 1
            choices = [n for n in names if not (OPS[n][1] and ragged)
                       and not (n == "unbatch" and not rows)
                       and not (n == "rebatch" and (not rows or rows[-1]))]  # rebatch stacks rows
            if not placed and step >= at and require in choices:
                op, placed = require, True
            elif not placed and step == count - 1 and require in ("unbatch", "rebatch") and not ragged:
                op = draw(st.sampled_from(["batch", "batch_parallel"]))  # makes the required op possible
                count += 1
            else:
                op = draw(st.sampled_from(choices))
            p = {}
            if op in ("batch", "batch_parallel", "padded_batch", "rebatch"):
                p = {"size": draw(st.integers(1, 4)), "drop": draw(st.booleans())}
            elif op == "map_rng":
                p = {"seed": draw(st.integers(0, 99)), "par": draw(st.sampled_from([None, 2]))}
            elif op in ("interleave", "interleave_parallel"):
                p = {"block": draw(st.integers(1, 2))}
            elif op == "shuffle":
                p = {"buffer": draw(st.integers(1, 8)), "seed": draw(st.integers(0, 99)),
                     "reshuffle": draw(st.booleans())}
            elif op in ("take", "skip"):
                p = {"count": draw(st.integers(-1, 8))}
            elif op == "shard":
                num = draw(st.integers(1, 3))
                p = {"num": num, "index": draw(st.integers(0, num - 1))}
            elif op == "window":
                p = {"shift": draw(st.integers(1, 3)), "drop": draw(st.booleans())}
            elif op == "prefetch":
                p = {"buffer": draw(st.sampled_from([1, 2, -1]))}
            elif op == "sample":
                p = {"seed": draw(st.integers(0, 99))}
            elif op == "ignore_errors":
                p = {"par": draw(st.sampled_from([None, 2]))}
            steps.append([op, p])
            if op in ("batch", "batch_parallel"):
                rows.append(False)
                ragged = not p["drop"]
            elif op == "padded_batch":
                rows.append(ragged)
                ragged = True
            elif op == "unbatch":
                ragged = rows.pop()
            elif op == "rebatch":
                ragged = rows[-1] or not p["drop"]
            elif op in ("zip", "enumerate", "scan", "unique"):
                rows = []  # a scalar component joins the element: it is not a batch any more
                ragged = ragged and op != "unique"
            elif op == "group_by_window":
                rows.append(False)
                ragged = True
        from hypothesis import assume

        assume(placed)  # a required op the drawn element structure never allowed
        n = draw(st.integers(1, 12))  # an empty source: map specs are unknown (padded_batch refuses them)
        return {"source": [source, {"n": n}], "ops": steps, "dir": directory}

    return draw_recipe()
