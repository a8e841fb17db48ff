"""The global seed and how random transformations get their seeds (TensorFlow's two-level scheme).

This module holds one of jaxfeed's few documented global switches: the global seed, set by
``jaxfeed.determinism.set_random_seed`` (or ``set_global_seed`` here).

Rules, applied when a random transformation is *constructed* (as in tf.data):
- op seed and global seed: both are used;
- op seed only: the global seed defaults to the constant 87654321, so runs reproduce;
- global seed only: the op seed is derived from the node's **stable identity** -- a digest of its kind,
  its arguments and the graph above it -- not from a counter of ops built so far. Adding an unrelated
  transformation elsewhere (another branch, or downstream) does not change this node's randomness;
  changing what feeds it does.
- neither: fresh entropy is drawn when each iterator is created, so each run differs (and determinism
  mode refuses such a pipeline).

Each iterator then seeds a numpy ``PCG64`` generator from (global seed, op seed, iteration key), where the
iteration key says which epoch of which enclosing ``repeat`` the iterator serves.
"""

from __future__ import annotations

import hashlib
import secrets

import numpy as np

from . import c_extensions

DEFAULT_GRAPH_SEED = 87654321

_global_seed: int | None = None

# Called with the node's identity when a random transformation is built with neither an op seed nor a
# global seed; ``jaxfeed.determinism`` installs a hook that raises while determinism is enabled (as TF does).
unseeded_hook = None


def set_global_seed(seed: int | None) -> None:
    global _global_seed
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    _global_seed = None if seed is None else int(seed)


def get_global_seed() -> int | None:
    return _global_seed


def resolve(op_seed: int | None, identity: str) -> tuple[int, int] | None:
    """(global seed, op seed) for a node built now, or None when the run should draw fresh entropy."""
    if op_seed is not None and (not isinstance(op_seed, (int, np.integer)) or isinstance(op_seed, bool)):
        raise TypeError(f"seed must be an int or None, got {op_seed!r}")
    g = _global_seed
    if op_seed is None and g is None:
        if unseeded_hook is not None:
            unseeded_hook(identity)
        return None
    if g is None:
        g = DEFAULT_GRAPH_SEED
    if op_seed is None:
        op_seed = int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "little") >> 1
    return int(g), int(op_seed)


def fresh() -> tuple[int, int]:
    """Seeds from the operating system's entropy, for unseeded transformations."""
    return secrets.randbits(63), secrets.randbits(63)


def generator(seeds: tuple[int, int], *keys: int) -> np.random.Generator:
    """A numpy generator for (seeds, keys); the same inputs give the same stream in any process: a PCG64
    seeded as ``SeedSequence([*seeds, *keys])`` (each masked to 64 bits) seeds it. With the optional C hash
    (``pipeline/_seed_c.c``) a generator costs ~3 us instead of ~11.6 (see ``KeyedSeed``)."""
    material = [s & 0xFFFFFFFFFFFFFFFF for s in seeds] + [int(k) & 0xFFFFFFFFFFFFFFFF for k in keys]
    if _seed_words is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(material)))
    return np.random.Generator(np.random.PCG64(KeyedSeed(material)))


def _load_seed_c():
    """``_seed_c.seed_words`` (``pipeline/_seed_c.c``), or None: not built (no compiler at install time) or
    disabled with ``JAXFEED_NO_C_EXT=1`` (read at import; tests set ``_seed_words`` to None)."""
    c = c_extensions.load("jaxfeed.pipeline._seed_c")
    return None if c is None else c.seed_words


_seed_words = _load_seed_c()
_WORDS = np.dtype("<u8")  # the C hash's bytes (little-endian, as numpy's SeedSequence views its words)


class KeyedSeed(np.random.bit_generator.ISpawnableSeedSequence):
    """``np.random.SeedSequence(entropy)`` for a list of ints in [0, 2**64), seeding a PCG64 with the same
    words (``generate_state(4, np.uint64)``) from the C hash: numpy's SeedSequence spends ~9 us of GIL-held
    time on it, which per element of a ``with_rng`` map made two map threads slower than one (each numpy call
    in the function handed the GIL to a thread that then held it through a whole seeding; P4 with_rng: 136
    us of CPU an image on two threads against 66 on one). Anything else -- other word counts, ``spawn``,
    ``pool``, ``n_children_spawned`` -- is numpy's own SeedSequence for the same entropy, made when first
    asked. ``entropy`` and ``spawn_key`` read as a SeedSequence's do (``determinism.rng.key_material``)."""

    __slots__ = ("entropy", "_real")
    spawn_key = ()

    def __init__(self, entropy: list):
        self.entropy = entropy
        self._real = None

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words == 4 and dtype is np.uint64:
            return np.frombuffer(_seed_words(tuple(self.entropy)), _WORDS).astype(np.uint64, copy=False)
        return self.seed_sequence().generate_state(n_words, dtype)

    def spawn(self, n_children):
        return self.seed_sequence().spawn(n_children)

    def seed_sequence(self) -> np.random.SeedSequence:
        """numpy's SeedSequence for this entropy (made once)."""
        if self._real is None:
            self._real = np.random.SeedSequence(self.entropy)
        return self._real

    def __getattr__(self, name):  # pool, pool_size, n_children_spawned, state: numpy's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.seed_sequence(), name)

    def __reduce__(self):
        return KeyedSeed, (list(self.entropy),)

    def __repr__(self):
        return f"KeyedSeed(entropy={self.entropy!r})"


def generator_state(gen: np.random.Generator) -> dict:
    """A JSON-friendly snapshot of a PCG64 generator."""
    state = gen.bit_generator.state
    return {"state": int(state["state"]["state"]), "inc": int(state["state"]["inc"]),
            "has_uint32": int(state["has_uint32"]), "uinteger": int(state["uinteger"])}


def restore_generator(snapshot: dict) -> np.random.Generator:
    """The generator ``generator_state`` saved. A snapshot comes from a state file: each field is checked
    (a PCG64 state and increment are 128-bit, ``uinteger`` 32-bit) so that a malformed one is an
    InvalidArgumentError, not numpy's OverflowError."""
    for key, bits in (("state", 128), ("inc", 128), ("has_uint32", 1), ("uinteger", 32)):
        value = snapshot.get(key) if isinstance(snapshot, dict) else None
        if type(value) is not int or not 0 <= value < 2 ** bits:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"Iterator state holds a random generator whose {key!r} is {value!r:.60}; "
                                       f"expected an integer in [0, 2**{bits}).", "set_state")
    bitgen = np.random.PCG64()
    bitgen.state = {"bit_generator": "PCG64",
                    "state": {"state": int(snapshot["state"]), "inc": int(snapshot["inc"])},
                    "has_uint32": int(snapshot["has_uint32"]), "uinteger": int(snapshot["uinteger"])}
    return np.random.Generator(bitgen)
