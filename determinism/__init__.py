"""jaxfeed.determinism: bit-identical pipelines and training runs, and a report when they are not.

Two lines turn it on (before the first JAX computation)::

    from jaxfeed import determinism
    determinism.enable_op_determinism(); determinism.set_random_seed(42)

- ``enable_op_determinism`` / ``disable_op_determinism`` / ``is_op_determinism_enabled``, ``settings()``:
  the switch and the JAX/XLA settings it applies (``config.py``).
- ``set_random_seed(seed)``: Python's ``random``, NumPy's global RNG and jaxfeed's global seed.
- The deterministic-mode rewriter runs on every pipeline at iterator creation (``rewriter.py``); stateful
  functions are found by inspecting their bytecode (``inspection.py``).
- ``rng.jax_key`` / ``rng.with_jax_key``: JAX keys for per-element randomness (``map(with_rng=True)``).
- ``check_determinism`` (and the ``jaxfeed-check-determinism`` command): run a pipeline twice and report
  the first diverging element and the node that introduced it (``checker.py``).
- ``manifest(dataset)`` / ``compare_manifests``: what is needed to replay a run (``run_manifest.py``).
- ``ordered_sum``: reductions in a fixed order (``reduction.py``).

Importing this package does not import JAX.
"""

from __future__ import annotations

import random as _random

import numpy as _np

from ..pipeline import random_seed as _random_seed
from ..pipeline.errors import UnimplementedError
from . import config, inspection, rewriter  # noqa: F401  (rewriter registers its pass on import)
from .config import (DeterminismWarning, disable_op_determinism, enable_op_determinism, format_settings,
                     is_op_determinism_enabled, settings)
from .inspection import stateful
from .rng import jax_key, with_jax_key


def set_random_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global RNG and jaxfeed's global seed (``tf.random.set_seed``'s
    role). Random transformations built afterwards derive their op seeds from this seed and their node's
    stable identity (kind, arguments, the graph above it): adding an unrelated transformation elsewhere
    does not change them. JAX keys come from ``rng.jax_key`` or ``jax_key_for(seed)``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, _np.integer)):
        raise TypeError(f"set_random_seed: seed must be an int, got {seed!r}")
    seed = int(seed)
    _random_seed.set_global_seed(seed)
    _random.seed(seed)
    _np.random.seed(seed & 0xFFFFFFFF)


def get_random_seed():
    return _random_seed.get_global_seed()


def op_seed(identity: str, seed: int | None = None):
    """The (global, op) seed pair a random operation named ``identity`` gets under the current global seed
    (for user code that wants the same scheme, e.g. a JAX training step's key)."""
    return _random_seed.resolve(seed, identity)


def jax_key_for(identity: str, seed: int | None = None):
    """A JAX key for an operation named ``identity`` derived from the global seed (and an op seed)."""
    seeds = op_seed(identity, seed)
    if seeds is None:
        raise RuntimeError("jax_key_for: no seed; call jaxfeed.determinism.set_random_seed first")
    return jax_key(_random_seed.generator(seeds))


def __getattr__(name):  # the heavier pieces load on first use
    if name in ("check_determinism", "CheckReport"):
        from . import checker

        return getattr(checker, name)
    if name in ("manifest", "compare_manifests"):
        from . import run_manifest

        return getattr(run_manifest, name)
    if name in ("ordered_sum", "ordered_mean", "psum_in_order", "pmean_in_order", "sum_over_batch",
                "mean_over_batch"):
        from . import reduction

        return getattr(reduction, name)
    raise AttributeError(f"module 'jaxfeed.determinism' has no attribute {name!r}")


__all__ = ["enable_op_determinism", "disable_op_determinism", "is_op_determinism_enabled", "settings",
           "format_settings", "set_random_seed", "get_random_seed", "op_seed", "jax_key", "jax_key_for",
           "with_jax_key", "stateful", "check_determinism", "CheckReport", "manifest", "compare_manifests",
           "ordered_sum", "ordered_mean", "psum_in_order", "pmean_in_order", "sum_over_batch", "mean_over_batch",
           "DeterminismWarning", "UnimplementedError"]
