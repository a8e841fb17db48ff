"""The per-element generators' seeding (``random_seed.generator``) through the optional C hash
(``pipeline/_seed_c.c``) against numpy's own ``SeedSequence``, which it replaces: the same words for every
entropy, so the same streams, children, pickles and JAX keys either way; and the way numpy's SeedSequence was
costly -- ~9 us of GIL-held time per element of a ``with_rng`` map -- is off the per-element path.

Skipped where the extension is not built; ``random_seed._seed_words = None`` is what ``JAXFEED_NO_C_EXT=1``
does at import."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.determinism.rng import key_material
from jaxfeed.pipeline import Dataset, random_seed

_c = pytest.importorskip("jaxfeed.pipeline._seed_c", reason="the C extension is not built")

WORD64 = st.integers(0, 2**64 - 1)
# ints of every word count: 0 (one word), below 2**32 (one), above (two), and the edges
EDGY = st.one_of(WORD64, st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]))


def numpy_words(entropy):
    return np.random.SeedSequence(list(entropy)).generate_state(4, np.uint64)


@settings(max_examples=400, deadline=None)
@given(st.lists(EDGY, min_size=1, max_size=12))
def test_the_words_are_numpys_for_any_entropy(entropy):
    got = np.frombuffer(_c.seed_words(tuple(entropy)), "<u8")
    np.testing.assert_array_equal(got, numpy_words(entropy))


def test_out_of_range_or_odd_entropy_raises():
    with pytest.raises(OverflowError):
        _c.seed_words((2**64,))
    with pytest.raises(OverflowError):
        _c.seed_words((-1,))
    with pytest.raises(TypeError):
        _c.seed_words([1, 2])
    with pytest.raises(TypeError):
        _c.seed_words((1.5,))
    with pytest.raises(ValueError, match="too many"):
        _c.seed_words(tuple(range(2**40, 2**40 + 40)))


def numpy_generator(seeds, *keys):
    material = [s & 0xFFFFFFFFFFFFFFFF for s in seeds] + [k & 0xFFFFFFFFFFFFFFFF for k in keys]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(material)))


@settings(max_examples=100, deadline=None)
@given(st.tuples(WORD64, WORD64), st.lists(st.integers(-2**63, 2**64 - 1), max_size=4))
def test_a_generator_draws_numpys_stream(seeds, keys):
    ours, theirs = random_seed.generator(seeds, *keys), numpy_generator(seeds, *keys)
    np.testing.assert_array_equal(ours.integers(0, 2**63, 16), theirs.integers(0, 2**63, 16))
    assert ours.bit_generator.state == theirs.bit_generator.state


@pytest.mark.parametrize("c", [True, False])
def test_children_pickles_and_jax_keys_are_a_seed_sequences(c, monkeypatch):
    monkeypatch.setattr(random_seed, "_seed_words", _c.seed_words if c else None)
    ours, theirs = random_seed.generator((7, 8), 3, 2**40), numpy_generator((7, 8), 3, 2**40)
    assert [g.random() for g in ours.spawn(3)] == [g.random() for g in theirs.spawn(3)]
    assert ours.bit_generator.seed_seq.n_children_spawned == 3
    assert [g.random() for g in ours.spawn(1)] == [g.random() for g in theirs.spawn(1)]  # the 4th child
    ours.random(5)
    again = pickle.loads(pickle.dumps(ours))
    assert again.random(4).tolist() == ours.random(4).tolist()
    assert key_material(random_seed.generator((7, 8), 1)) == key_material(numpy_generator((7, 8), 1))
    assert list(ours.bit_generator.seed_seq.entropy) == [7, 8, 3, 2**40]
    assert tuple(ours.bit_generator.seed_seq.spawn_key) == ()


def test_the_per_element_path_runs_no_numpy_seed_sequence(monkeypatch):
    """What made a ``with_rng`` map slower on two threads than on one (module doc): it must not come back."""
    class Refused:
        def __init__(self, *args, **kwargs):
            raise AssertionError("numpy's SeedSequence on the per-element path")

    monkeypatch.setattr(np.random, "SeedSequence", Refused)
    got = list(Dataset.range(50).map(lambda x, rng: x + rng.integers(0, 1000), with_rng=True, seed=5,
                                     num_parallel_calls=2))
    assert len(got) == 50


@pytest.mark.parametrize("npc", [None, 2])
def test_a_with_rng_map_gives_the_same_numbers_either_way(npc, monkeypatch):
    def fn(x, rng):
        return x * 1000 + rng.integers(0, 1000), rng.random(2)

    def run():
        return [(int(a), b.tolist()) for a, b in Dataset.range(300).map(fn, with_rng=True, seed=11,
                                                                        num_parallel_calls=npc)]

    with_c = run()
    monkeypatch.setattr(random_seed, "_seed_words", None)
    assert run() == with_c


def test_the_environment_variable_forces_numpys_seed_sequence():
    code = ("from jaxfeed.pipeline import random_seed as r; g = r.generator((1, 2), 3); "
            "print(r._seed_words is None, type(g.bit_generator.seed_seq).__name__)")
    env = dict(os.environ, JAXFEED_NO_C_EXT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "SeedSequence"]
