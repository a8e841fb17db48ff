"""The optional C extensions -- ``pipeline/_values_c.c``, ``pipeline/_seed_c.c``, ``formats/_tfrecord_c.c`` --
built by the install where a compiler is found, each with a Python way beside it that gives the same values.

``load(module)`` is the extension module, or None where it is not built or ``JAXFEED_NO_C_EXT=1`` forces the
Python ways. The variable is read when ``load`` is called; the modules using an extension call it at import."""

from __future__ import annotations

import importlib
import os


def load(module: str):
    """``module`` (a full name: ``jaxfeed.pipeline._values_c``), or None: not built, or switched off."""
    if os.environ.get("JAXFEED_NO_C_EXT", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
