"""Which code a worker process runs for a function, as far as the consumer can tell without asking it.

A function of a module is pickled by reference (its module and name): a worker that imported the module
runs the code the module had then. After the module -- or one it imports, as ``other.helper(x)`` -- is edited
and reloaded here (``importlib.reload``, a notebook's autoreload), the pickled bytes are the same, and a worker
kept from before would run the old code where this process's threads run the new. Kept workers are therefore
reused only while the files stay as they were: ``signature`` is part of the process map's pool key, and the
interleave's process-wide workers compare ``file_stamps`` with those of the files they were sent before
(``remote_inner``).

One level of imports is followed (the modules the function's module refers to, and those its imported
functions and classes come from): an edit two imports away is not seen.
"""

from __future__ import annotations

import marshal
import os
import sys
import types


def signature(fn) -> bytes:
    """``fn``'s code and its files' stamps, as bytes: equal for a function whose workers may be kept."""
    code = getattr(fn, "__code__", None)
    try:
        out = marshal.dumps(code) if code is not None else b""
    except ValueError:  # (a code object marshal cannot write: never equal to another's)
        out = repr(id(code)).encode()
    for path, (size, mtime) in file_stamps(fn).items():
        out += f"|{path}|{size}|{mtime}".encode()
    return out


def file_stamps(fn) -> dict:
    """{file: (size, modification time in ns)} of ``module_files(fn)`` that exist."""
    out = {}
    for path in module_files(fn):
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[path] = (st.st_size, st.st_mtime_ns)
    return out


def module_files(fn) -> list:
    """The file of ``fn``'s module (not ``__main__``'s, whose functions are pickled by value), then those of
    the modules its module's globals are or come from (its imports, the functions and classes it imported),
    sorted."""
    def file_of(name):
        return getattr(sys.modules.get(name or ""), "__file__", None)

    module = getattr(fn, "__module__", None)
    own = file_of(module) if module != "__main__" else None
    others = set()
    for value in list((getattr(fn, "__globals__", None) or {}).values()):
        if isinstance(value, types.ModuleType):
            others.add(getattr(value, "__file__", None))
        elif isinstance(value, (types.FunctionType, type)):
            others.add(file_of(getattr(value, "__module__", None)))
    others.discard(None)
    others.discard(own)
    others.discard(file_of("__main__"))
    return ([own] if own else []) + sorted(others)
