"""The determinism switch and the JAX/XLA settings it applies (one of jaxfeed's few global switches).

``enable_op_determinism()`` does three things:

1. turns on the deterministic-mode rewriter that every pipeline passes through at iterator creation
   (``jaxfeed.determinism.rewriter``), and the seed check at construction of random transformations;
2. asks XLA for deterministic kernels by adding :data:`XLA_DETERMINISM_FLAGS` to ``XLA_FLAGS``. XLA reads
   ``XLA_FLAGS`` once, when the JAX backend starts, so the flags only take effect if determinism is enabled
   **before the first JAX computation** (importing jax is fine; running anything is not). If the backend
   has already started:
   - with an accelerator (GPU/TPU) backend: ``FailedPreconditionError`` -- the flags cannot take effect and
     GPU reductions (scatter-add, some convolutions) may differ from run to run;
   - with only the CPU backend: a ``DeterminismWarning`` (XLA's CPU kernels are deterministic already, so
     runs still reproduce; the warning says the GPU flags were not applied);
   - ``strict=True`` raises in both cases.
3. sets JAX's PRNG to the partitionable threefry implementation (``jax_threefry_partitionable=True``,
   ``jax_default_prng_impl="threefry2x32"``), so random numbers do not depend on how an array is sharded
   over devices. If jax is not imported yet this only sets the ``JAX_*`` environment variables, so
   importing ``jaxfeed.determinism`` never imports jax.

``settings()`` returns what is in effect (print it, or find it in a run manifest).
"""

from __future__ import annotations

import os
import sys
import warnings

from ..pipeline import random_seed
from ..pipeline.errors import FailedPreconditionError

XLA_DETERMINISM_FLAGS = (
    "--xla_gpu_deterministic_ops=true",              # deterministic GPU kernels (reductions, scatter, conv)
    "--xla_gpu_exclude_nondeterministic_ops=true",   # refuse to compile ops that have no deterministic kernel
    "--xla_gpu_enable_scatter_determinism_expander=true",  # rewrite scatter-add into a deterministic form
)
JAX_CONFIG = {"jax_threefry_partitionable": True, "jax_default_prng_impl": "threefry2x32"}


class DeterminismWarning(UserWarning):
    """Determinism is on but something could not be made deterministic (the message says what)."""


_enabled = False
_xla_status = "not applied"  # what happened to the XLA flags, in words
_saved: dict = {}  # what enable changed, to undo it: env vars and jax config values


def is_op_determinism_enabled() -> bool:
    return _enabled


def enable_op_determinism(strict: bool = False) -> None:
    """Turn determinism on (see the module docstring for what it changes and when it must be called)."""
    global _enabled
    _apply_xla_flags(strict)
    _apply_jax_config()
    _enabled = True
    random_seed.unseeded_hook = _refuse_unseeded


def disable_op_determinism() -> None:
    """Turn the rewriter off and undo the settings that can still be undone (XLA flags of a running
    backend stay in force: XLA read them at start-up)."""
    global _enabled, _xla_status
    _enabled = False
    if random_seed.unseeded_hook is _refuse_unseeded:
        random_seed.unseeded_hook = None
    if "XLA_FLAGS" in _saved and not _backend_started():
        _restore_env("XLA_FLAGS", _saved.pop("XLA_FLAGS"))
        _xla_status = "not applied"
    for name, value in list(_saved.items()):
        if name.startswith("env:"):
            _restore_env(name[4:], value)
        elif name.startswith("jax:") and "jax" in sys.modules:
            sys.modules["jax"].config.update(name[4:], value)
        else:
            continue
        del _saved[name]


def settings() -> dict:
    """The effective determinism settings, JSON-friendly (also recorded in run manifests)."""
    out = {
        "op_determinism": _enabled,
        "global_seed": random_seed.get_global_seed(),
        "xla_flags_required": list(XLA_DETERMINISM_FLAGS),
        "xla_flags_env": os.environ.get("XLA_FLAGS", ""),
        "xla_flags_status": _xla_status,
        "jax_backend_started": _backend_started(),
    }
    if "jax" in sys.modules:
        cfg = sys.modules["jax"].config
        out["jax_config"] = {k: getattr(cfg, k, None) for k in JAX_CONFIG}
    else:
        out["jax_config"] = {k: os.environ.get(k.upper()) for k in JAX_CONFIG}
        out["jax_config_note"] = "jax not imported yet: values are the JAX_* environment variables it will read"
    return out


def format_settings() -> str:
    return "\n".join(f"{k}: {v}" for k, v in settings().items())


# ---------------------------------------------------------------------------------------------- helpers
SEED_MESSAGE = ("Random ops require a seed to be set when determinism is enabled. Please set a seed before "
                "building the pipeline, e.g. by calling jaxfeed.determinism.set_random_seed(1), or pass seed= "
                "to {what}.")


def _refuse_unseeded(identity: str) -> None:
    """Installed in ``random_seed.unseeded_hook`` while determinism is on: TF raises at construction."""
    raise RuntimeError(SEED_MESSAGE.format(what=identity.split(":", 1)[0].lower() or "the transformation"))


def _backend_started() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - a jax without this module: assume the worst
        return True
    return bool(xla_bridge.backends_are_initialized())


def _started_platforms() -> set[str]:
    from jax._src import xla_bridge

    return {b.platform for b in xla_bridge._backends.values()}


def _flags_in(env: str) -> set[str]:
    return set(env.split())


def _apply_xla_flags(strict: bool) -> None:
    global _xla_status
    current = os.environ.get("XLA_FLAGS", "")
    missing = [f for f in XLA_DETERMINISM_FLAGS if f not in _flags_in(current)]
    if not _backend_started():
        if missing:
            _saved.setdefault("XLA_FLAGS", current if "XLA_FLAGS" in os.environ else None)
            os.environ["XLA_FLAGS"] = " ".join([current, *missing]).strip()
        _xla_status = "set in XLA_FLAGS before the JAX backend started: in effect"
        return
    if not missing and "XLA_FLAGS" not in _saved:
        _xla_status = "present in XLA_FLAGS (assumed set before the JAX backend started)"
        return
    if "XLA_FLAGS" in _saved:  # we set them ourselves before the backend started
        _xla_status = "set in XLA_FLAGS before the JAX backend started: in effect"
        return
    platforms = _started_platforms()
    message = (f"enable_op_determinism(): the JAX backend ({', '.join(sorted(platforms))}) has already "
               f"started, so the XLA flags {' '.join(missing)} cannot take effect. Call "
               "jaxfeed.determinism.enable_op_determinism() before the first JAX computation (or put the flags "
               "in XLA_FLAGS before starting Python).")
    _xla_status = "NOT in effect: the JAX backend started before enable_op_determinism()"
    if strict or platforms - {"cpu"}:
        raise FailedPreconditionError(message, "enable_op_determinism")
    warnings.warn(message + " Only the CPU backend is running, whose kernels are deterministic already.",
                  DeterminismWarning, stacklevel=3)


def _apply_jax_config() -> None:
    if "jax" in sys.modules:
        cfg = sys.modules["jax"].config
        for key, value in JAX_CONFIG.items():
            old = getattr(cfg, key, None)
            if old != value:
                _saved.setdefault(f"jax:{key}", old)
                cfg.update(key, value)
        return
    for key, value in JAX_CONFIG.items():
        env = key.upper()
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if os.environ.get(env) != text:
            _saved.setdefault(f"env:{env}", os.environ.get(env))
            os.environ[env] = text


def _restore_env(name: str, value) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _reset_for_tests() -> None:
    """Called by tests/conftest.py after each test: determinism off, settings undone."""
    disable_op_determinism()
    if "XLA_FLAGS" in _saved:  # the backend started: the env var may still be undone for subprocesses
        _restore_env("XLA_FLAGS", _saved.pop("XLA_FLAGS"))
