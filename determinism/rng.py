"""Per-element randomness that stays parallel: keys derived from (seeds, iteration, element position).

``Dataset.map(fn, with_rng=True, seed=...)`` calls ``fn(*element, rng)`` with a ``numpy.random.Generator``
keyed on the node's seeds, the epoch and the element's logical position, so the numbers an element gets do
not depend on ``num_parallel_calls``, on threads vs processes, or on a restore from a checkpoint. This module
adds the JAX side without making the pipeline import JAX:

- ``jax_key(rng)``: a ``jax.random.key`` derived from the same material as the generator, *without*
  consuming any numbers from it (the numpy stream is unchanged);
- ``with_jax_key(fn)``: wraps ``fn(*element, key)`` for ``map(with_jax_key(fn), with_rng=True, seed=...)``.
"""

from __future__ import annotations

import hashlib

import numpy as np


def key_material(rng_or_seed) -> int:
    """A 63-bit integer that identifies the randomness of a per-element generator (or an int seed)."""
    if isinstance(rng_or_seed, (int, np.integer)) and not isinstance(rng_or_seed, bool):
        return int(rng_or_seed) & (2 ** 63 - 1)
    if isinstance(rng_or_seed, np.random.Generator):
        seed_seq = getattr(rng_or_seed.bit_generator, "seed_seq", None)
        if seed_seq is None or seed_seq.entropy is None:
            raise ValueError("jax_key: the generator has no seed material (was it restored from a state?)")
        entropy = seed_seq.entropy
        words = [int(w) for w in (entropy if isinstance(entropy, (list, tuple, np.ndarray)) else [entropy])]
        words += [int(w) for w in seed_seq.spawn_key]
        digest = hashlib.blake2b(repr(words).encode(), digest_size=8, person=b"jaxfeed-key").digest()
        return int.from_bytes(digest, "little") >> 1
    raise TypeError(f"jax_key: expected a numpy Generator from map(with_rng=True) or an int, got "
                    f"{type(rng_or_seed).__name__}")


def jax_key(rng_or_seed):
    """A typed JAX PRNG key derived from a per-element generator (or an int). Imports JAX."""
    import jax

    return jax.random.key(key_material(rng_or_seed))


class with_jax_key:
    """``fn(*element, key)`` for ``map(with_jax_key(fn), with_rng=True, seed=...)``; picklable when ``fn``
    is, so it works with the process executor."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__qualname__ = f"with_jax_key({getattr(fn, '__qualname__', self.__name__)})"

    def __call__(self, *args):
        *element, rng = args
        return self.fn(*element, jax_key(rng))
