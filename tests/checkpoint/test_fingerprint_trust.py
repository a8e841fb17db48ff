"""A saved state restores only into a pipeline that decides positions the same way (issue 14 defect 6).

The graph fingerprint covers what decides which element comes where: the file names a reader is given
(their contents and order, not only how many), the files ``list_files`` matched, in-memory data, the
resolved seeds of random transformations, and the ``stateful`` markers of user functions. A state from a
pipeline that differs in any of these is refused naming the first differing node.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import jaxfeed.determinism as determinism
from jaxfeed.formats.text import TextLineDataset
from jaxfeed.pipeline import Dataset, ExternalStatePolicy, Options, checkpoint, errors, graph
from jaxfeed.pipeline import random_seed


@pytest.fixture(autouse=True)
def _no_global_seed():
    saved = random_seed.get_global_seed()
    yield
    random_seed.set_global_seed(saved)


def write_lines(directory, name, n=3):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.writelines(f"{name}-{i}\n" for i in range(n))
    return path


def state_after(dataset, steps):
    it = iter(dataset)
    for _ in range(steps):
        next(it)
    return checkpoint.serialize(it.get_state())


# ------------------------------------------------------------------------------------------ file lists
def test_state_over_files_in_one_order_is_refused_over_the_same_files_in_another(tmp_path):
    files = [write_lines(tmp_path, f"a{i}") for i in range(3)]
    state = state_after(TextLineDataset(files), 4)  # inside a1
    # before: accepted, and read a0 again and never a2
    with pytest.raises(errors.FailedPreconditionError, match=r"node 0 from the sources.*TensorSlices.*same arguments"):
        TextLineDataset(files[::-1]).make_iterator(state=state)


def test_state_over_some_files_is_refused_over_other_files(tmp_path):
    a = [write_lines(tmp_path, f"a{i}") for i in range(3)]
    b = [write_lines(tmp_path, f"b{i}") for i in range(3)]
    state = state_after(TextLineDataset(a), 4)
    # before: accepted, and read the rest of a1, a file not in the list
    with pytest.raises(errors.FailedPreconditionError, match="first differing node: node 0"):
        TextLineDataset(b).make_iterator(state=state)


def test_state_over_the_same_files_resumes_where_it_stopped(tmp_path):
    files = [write_lines(tmp_path, f"a{i}") for i in range(3)]
    state = state_after(TextLineDataset(files), 4)
    assert list(TextLineDataset(list(files)).make_iterator(state=state)) == [b"a1-1", b"a1-2", b"a2-0", b"a2-1",
                                                                           b"a2-2"]


def test_state_of_list_files_is_refused_when_the_pattern_matches_other_files(tmp_path):
    for i in range(3):
        write_lines(tmp_path, f"part-{i}.txt")
    pattern = str(tmp_path / "part-*.txt")

    def pipeline():
        return Dataset.list_files(pattern, shuffle=False).flat_map(TextLineDataset)

    state = state_after(pipeline(), 4)
    os.remove(tmp_path / "part-0.txt")
    write_lines(tmp_path, "part-3.txt")  # same pattern, same number of matches, other files
    with pytest.raises(errors.FailedPreconditionError, match=r"node 0 from the sources.*ListFiles"):
        pipeline().make_iterator(state=state)


def test_state_of_an_object_array_source_is_refused_when_its_strings_differ():
    state = state_after(Dataset.from_tensor_slices(np.array([b"x", b"y", b"z"], dtype=object)), 1)
    with pytest.raises(errors.FailedPreconditionError, match="node 0"):
        Dataset.from_tensor_slices(np.array([b"x", b"q", b"z"], dtype=object)).make_iterator(state=state)


def test_fingerprint_sees_a_change_anywhere_in_a_large_numeric_array():
    data = np.arange(3_000_001, dtype=np.int64)  # before: a strided sample of 4096 values was hashed
    before = Dataset.from_tensor_slices(data).fingerprint()
    changed = data.copy()
    changed[1_234_567] += 1
    assert Dataset.from_tensor_slices(changed).fingerprint() != before
    assert Dataset.from_tensor_slices(data.copy()).fingerprint() == before


def test_a_node_digests_its_data_once_however_often_it_is_iterated(monkeypatch):
    ds = Dataset.from_tensor_slices(np.arange(100_000)).batch(10)
    ds.fingerprint()
    calls = []
    monkeypatch.setattr(graph, "_hash_array", lambda *a: calls.append(a))
    for _ in range(3):
        next(iter(ds))
    assert ds.fingerprint() and calls == []


def test_fingerprint_is_the_same_in_another_process():
    code = ("import numpy as np; from jaxfeed.pipeline import Dataset, random_seed; random_seed.set_global_seed(5); "
            "print(Dataset.from_tensor_slices(np.array([b'f0', b'f1'], dtype=object)).shuffle(2).map(len)"
            ".fingerprint())")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
            .stdout.strip() for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 24


# ------------------------------------------------------------------------------------------ seeds
def test_state_saved_under_one_global_seed_is_refused_under_another():
    determinism.set_random_seed(1)
    state = state_after(Dataset.range(10).shuffle(10), 2)
    determinism.set_random_seed(2)
    # before: accepted, and resumed a shuffle whose order is another one
    with pytest.raises(errors.FailedPreconditionError, match=r"Shuffle\(buffer_size=10.*same arguments"):
        Dataset.range(10).shuffle(10).make_iterator(state=state)
    determinism.set_random_seed(1)
    assert len(list(Dataset.range(10).shuffle(10).make_iterator(state=state))) == 8


# ------------------------------------------------------------------------------------------ stateful markers
@determinism.stateful
def _marked(x):
    return x


def test_function_marked_stateful_is_external_state_for_the_policy():
    it = iter(Dataset.range(3).map(_marked))
    next(it)
    # before: saved without a word (the marker was not seen by ExternalStatePolicy)
    with pytest.raises(errors.FailedPreconditionError,
                       match=r"Map\(map_func=_marked.*marked @jaxfeed.determinism.stateful"):
        it.get_state()


def test_marked_function_saves_when_the_policy_allows_it():
    options = Options()
    options.experimental_external_state_policy = ExternalStatePolicy.IGNORE
    it = iter(Dataset.range(3).map(_marked).with_options(options))
    next(it)
    assert it.get_state()["root"] is not None


def test_node_declared_stateful_false_overrides_the_marker_on_its_function():
    it = iter(Dataset.range(3).map(_marked, stateful=False))
    next(it)
    assert it.get_state()["root"] is not None


def test_stateful_marker_is_part_of_the_fingerprint():
    def same_function_twice():
        def f(x):
            return x

        return f

    plain, marked = same_function_twice(), same_function_twice()
    determinism.stateful(marked)
    assert graph.function_identity(plain) == graph.function_identity(marked)
    assert Dataset.range(3).map(plain).fingerprint() != Dataset.range(3).map(marked).fingerprint()


@pytest.mark.parametrize("array", [np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]"),
                                   np.array([1, 2], dtype="timedelta64[s]"),
                                   np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
                                   np.array(["ab", "c"]), np.arange(12.0).reshape(3, 4)[:, ::2]], ids=str)
def test_fingerprint_digests_arrays_of_every_plain_dtype(array):
    h1, h2 = graph.hashlib.blake2b(), graph.hashlib.blake2b()
    graph._hash_value(h1, array)
    changed = array.copy()
    changed[-1] = changed[0]
    graph._hash_value(h2, changed)
    assert h1.digest() != h2.digest()
