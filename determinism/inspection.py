"""Is a user function stateful? A static look at its bytecode, closure and globals.

``analyse(fn)`` walks the function's bytecode with a small abstract stack that remembers where each value
came from (a global, a closure cell, ``self``, a local), resolves global and closure names to the real
objects, and follows attribute chains (``np.random.rand``). It descends into nested code (lambdas,
comprehensions) and into the functions it calls that are defined in the same module.

What it reports (``Finding.kind``):

- ``global_rng``   the process-wide generators: ``random.*``, legacy ``numpy.random.*`` (``rand``,
                   ``shuffle``, ``seed``...). Deterministic only when run serially after ``set_random_seed``.
- ``shared_rng``   a generator object (``numpy.random.Generator``, ``RandomState``, ``random.Random``) held in
                   a global, a closure or ``self``: its state advances across calls, so order matters.
- ``shared_iterator``  an iterator (a Python generator, ``itertools.count``, an open file...) held in a global,
                   a closure, ``self`` or a partial's arguments: ``next()`` on it advances state shared by calls.
- ``global_write`` / ``nonlocal_write`` / ``mutation``  writes to global or enclosing state, ``obj.attr =``,
                   ``obj[k] =``, or mutating methods (``append``, ``update``...) on captured objects.
- ``io``           file, process and network I/O (``open``, ``os.remove``, ``subprocess``, ``socket``...).
- ``entropy``      ``os.urandom``, ``secrets``, ``uuid.uuid1/uuid4``, ``random.SystemRandom``: no
                   deterministic implementation exists (``UnimplementedError`` under determinism).
- ``clock``        ``time.time``, ``perf_counter``, ``datetime.now``...: likewise no deterministic version.
- ``unseeded_generator``  ``numpy.random.default_rng()`` / ``random.Random()`` / a bit generator built
                   without a seed inside the function: it draws OS entropy and ignores the global seed.

``print`` and ``logging`` are side effects that do not change the data (tf.data's Print/Assert are
likewise safe): not reported. The analysis is a heuristic: dynamic tricks (``getattr(mod, name)``,
``eval``, C extensions holding state) escape it. Users override it with ``map(..., stateful=True/False)`` or
by decorating a function with :func:`jaxfeed.determinism.stateful`.
"""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import datetime
import dis
import functools
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import time
import types
import uuid

import numpy as np

MUTATORS = frozenset({"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "add",
                      "discard", "setdefault", "appendleft", "extendleft", "popleft", "put", "put_nowait",
                      "write", "writelines", "send", "sort", "reverse", "fill", "resize", "itemset",
                      "__setitem__", "__delitem__", "__iadd__"})
STATEFUL_KINDS = ("global_rng", "shared_rng", "shared_iterator", "global_write", "nonlocal_write", "mutation",
                  "io")
UNIMPLEMENTED_KINDS = ("entropy", "clock", "unseeded_generator")
_STATEFUL_FLAG = "__jaxfeed_stateful__"


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str
    what: str   # the operation, e.g. "numpy.random.rand"
    where: str  # function and line

    def __str__(self):
        return f"{self.what} ({self.kind.replace('_', ' ')}) in {self.where}"


@dataclasses.dataclass
class Report:
    findings: list
    declared: bool | None = None  # the user's explicit flag, which wins

    @property
    def stateful(self) -> bool:
        if self.declared is not None:
            return self.declared
        return any(f.kind in STATEFUL_KINDS for f in self.findings)

    @property
    def unimplemented(self) -> list:
        """Operations that have no deterministic implementation (ignored when the user declared False)."""
        if self.declared is False:
            return []
        return [f for f in self.findings if f.kind in UNIMPLEMENTED_KINDS]

    def reason(self) -> str:
        if self.declared is not None:
            return f"declared stateful={self.declared}"
        hits = [f for f in self.findings if f.kind in STATEFUL_KINDS]
        return "; ".join(str(f) for f in hits[:3]) + (f" (+{len(hits) - 3} more)" if len(hits) > 3 else "")


def stateful(fn=None, *, value: bool = True):
    """Declare a function stateful (``@stateful``) or not (``@stateful(value=False)``), overriding the
    inspection for every transformation that calls it."""
    def mark(f):
        try:
            setattr(f, _STATEFUL_FLAG, bool(value))
        except (AttributeError, TypeError):
            raise TypeError(f"cannot mark {f!r} as stateful; pass stateful= to the transformation") from None
        return f

    return mark(fn) if fn is not None else mark


# ------------------------------------------------------------------------------ known operations
def _ids(*objs):
    return {id(o): o for o in objs}


def _qual(obj) -> str:
    mod = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    mod = {"posix": "os", "nt": "os", "_io": "io"}.get(mod, mod)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    return f"{mod}.{name}" if mod and mod != "builtins" else name


_ENTROPY = _ids(os.urandom, getattr(os, "getrandom", os.urandom), uuid.uuid1, uuid.uuid4, random.SystemRandom,
                secrets.token_bytes, secrets.token_hex, secrets.token_urlsafe, secrets.randbits, secrets.choice,
                secrets.randbelow)
_CLOCK = _ids(time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
              time.monotonic_ns, time.process_time, time.process_time_ns, time.thread_time, time.localtime,
              time.gmtime, time.ctime, time.asctime, datetime.datetime.now, datetime.datetime.utcnow,
              datetime.datetime.today, datetime.date.today)
_GENERATOR_CTORS = _ids(np.random.default_rng, np.random.Generator, np.random.RandomState, np.random.PCG64,
                        np.random.PCG64DXSM, np.random.Philox, np.random.SFC64, np.random.MT19937,
                        np.random.SeedSequence, random.Random)
_IO = _ids(builtins.open, builtins.input, os.write, os.remove, os.unlink, os.rename, os.replace, os.makedirs,
           os.mkdir, os.rmdir, os.system, os.open, os.truncate, shutil.copy, shutil.copyfile, shutil.move,
           shutil.rmtree, subprocess.run, subprocess.Popen, subprocess.call, subprocess.check_output,
           subprocess.check_call, socket.socket, socket.create_connection, np.save, np.savez, np.savetxt,
           np.load, np.loadtxt, np.fromfile, np.memmap)
_NP_LEGACY_FUNCS = {id(getattr(np.random, n)): n for n in ("seed", "get_state", "set_state")
                    if hasattr(np.random, n)}
_RNG_TYPES = (np.random.Generator, np.random.RandomState, random.Random, np.random.BitGenerator)


def _classify(obj):
    """(kind, name) for a known operation, or None. ``unseeded_generator`` is decided at the call."""
    try:
        key = id(obj)
        if key in _ENTROPY:
            return "entropy", _qual(obj)
        if key in _CLOCK:
            return "clock", _qual(obj)
        if key in _IO:
            return "io", _qual(obj)
        if key in _GENERATOR_CTORS:
            return "generator_ctor", _qual(obj)
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", "")
        if isinstance(owner, type) and issubclass(owner, datetime.date) and name in ("now", "utcnow", "today"):
            return "clock", f"{owner.__module__}.{owner.__qualname__}.{name}"
        if key in _NP_LEGACY_FUNCS:
            return "global_rng", f"numpy.random.{_NP_LEGACY_FUNCS[key]}"
        if owner is not None and not isinstance(owner, types.ModuleType):
            if owner is random._inst:
                return "global_rng", f"random.{obj.__name__}"
            if owner is np.random.mtrand._rand:
                return "global_rng", f"numpy.random.{obj.__name__}"
            if isinstance(owner, random.SystemRandom):
                return "entropy", f"random.SystemRandom.{obj.__name__}"
            if isinstance(owner, _RNG_TYPES):
                return "shared_rng", f"{type(owner).__name__}.{obj.__name__}"
        if isinstance(obj, _RNG_TYPES):
            return "shared_rng", f"a {type(obj).__name__} object"
        mod = getattr(obj, "__module__", None)
        if mod in ("fsspec.core", "fsspec") and getattr(obj, "__name__", "") in ("open", "open_files"):
            return "io", _qual(obj)
    except Exception:  # noqa: BLE001 - odd objects (proxies) must not break the analysis
        return None
    return None


def _is_iterator(obj) -> bool:
    """An iterator object (its own ``__iter__``, has ``__next__``): reading from it changes it. Checked by
    type only -- nothing on the object is called."""
    try:
        return isinstance(obj, collections.abc.Iterator) and not isinstance(obj, type)
    except Exception:  # noqa: BLE001 - odd objects (proxies) must not break the analysis
        return False


# ------------------------------------------------------------------------------ the analysis
_UNKNOWN = object()


@dataclasses.dataclass
class _Ref:
    root: str        # "global", "free", "self", "local", "other"
    name: str        # dotted chain, for messages
    obj: object = _UNKNOWN
    parent: object = _UNKNOWN  # the object the last attribute was read from


_cache: dict[int, tuple[object, Report]] = {}


def analyse(fn) -> Report:
    """The inspection report of a user function (cached per function object)."""
    hit = _cache.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    declared = getattr(fn, _STATEFUL_FLAG, None)
    findings: list[Finding] = []
    try:
        _Analyser(findings).callable(fn, module=_module_of(fn))
    except Exception as e:  # noqa: BLE001 - an analysis failure must not break the pipeline
        findings.append(Finding("unknown", f"analysis failed: {type(e).__name__}: {e}", _qual(fn)))
    report = Report(_dedupe(findings), declared if isinstance(declared, bool) else None)
    if len(_cache) > 4096:
        _cache.clear()
    _cache[id(fn)] = (fn, report)
    return report


def _dedupe(findings):
    seen, out = set(), []
    for f in findings:
        if (f.kind, f.what, f.where) not in seen:
            seen.add((f.kind, f.what, f.where))
            out.append(f)
    return out


def _module_of(fn):
    target = getattr(fn, "__func__", fn)
    if isinstance(target, functools.partial):
        target = target.func
    if not hasattr(target, "__code__") and not isinstance(target, types.BuiltinFunctionType):
        target = getattr(type(target), "__call__", target)
    return getattr(target, "__module__", None)


class _Analyser:
    MAX_DEPTH = 8

    def __init__(self, findings):
        self.findings = findings
        self.visited: set[int] = set()

    def callable(self, fn, module, depth=0):
        if depth > self.MAX_DEPTH or id(fn) in self.visited:
            return
        self.visited.add(id(fn))
        if isinstance(fn, functools.partial):
            for arg in list(fn.args) + list(fn.keywords.values()):
                self._check_value(arg, "partial argument", _qual(fn.func))
            return self.callable(fn.func, module, depth + 1)
        if isinstance(fn, types.MethodType):
            return self.function(fn.__func__, module, depth, self_obj=fn.__self__)
        if isinstance(fn, types.FunctionType):
            return self.function(fn, module, depth)
        kind = _classify(fn)
        if kind is not None:
            if kind[0] != "generator_ctor":
                self.findings.append(Finding(kind[0], kind[1], "the function itself"))
            return
        if isinstance(fn, (types.BuiltinFunctionType, np.ufunc, type)):
            return
        call = getattr(type(fn), "__call__", None)  # a callable object: inspect its __call__ with self
        if isinstance(call, types.FunctionType):
            for name, value in list(getattr(fn, "__dict__", {}).items()):
                self._check_value(value, f"self.{name}", _qual(call))
            return self.function(call, getattr(call, "__module__", module), depth, self_obj=fn)

    def _check_value(self, value, name, where):
        if isinstance(value, _RNG_TYPES):
            self.findings.append(Finding("shared_rng", f"{name} (a {type(value).__name__})", where))
        elif _is_iterator(value):
            self.findings.append(Finding("shared_iterator", f"{name} (a {type(value).__name__})", where))

    def function(self, fn, module, depth, self_obj=_UNKNOWN):
        code = fn.__code__
        # default arguments are made once and shared by every call (``def f(x, it=iter(...))``)
        for value in list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values()):
            self._check_value(value, "a default argument", _qual(fn))
        freevals = {}
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                freevals[name] = cell.cell_contents
            except ValueError:  # empty cell
                freevals[name] = _UNKNOWN
        self_name = code.co_varnames[0] if self_obj is not _UNKNOWN and code.co_argcount else None
        self.code(code, fn.__globals__, freevals, set(code.co_freevars), self_name, self_obj, module, depth)

    def code(self, code, globals_, freevals, outer_free, self_name, self_obj, module, depth):
        where = f"{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} " \
                f"({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
        stack: list = []

        def push(ref):
            stack.append(ref)

        def pop(n=1):
            out = None
            for _ in range(n):
                out = stack.pop() if stack else None
            return out

        def note(kind, what):
            self.findings.append(Finding(kind, what, where))

        def resolve_global(name):
            if name in globals_:
                return globals_[name]
            return getattr(builtins, name, _UNKNOWN)

        def loaded(ref: _Ref):
            """Look at a value as it is loaded: known operations, shared generators, same-module calls."""
            if ref.obj is _UNKNOWN:
                return
            if ref.root in ("global", "free", "self") and _is_iterator(ref.obj):
                note("shared_iterator", f"{ref.name} (a {type(ref.obj).__name__})")
                return
            kind = _classify(ref.obj)
            if kind is not None and kind[0] != "generator_ctor":
                if kind[0] == "shared_rng" and ref.root not in ("global", "free", "self"):
                    return
                note(kind[0], kind[1] if "." in kind[1] or kind[0] != "shared_rng" else f"{ref.name} ({kind[1]})")
                return
            if kind is None and ref.root in ("global", "free", "self"):
                target = ref.obj
                if isinstance(target, (types.FunctionType, types.MethodType, functools.partial)) and \
                        _module_of(target) == module and module is not None:
                    self.callable(target, module, depth + 1)

        for ins in dis.get_instructions(code):
            op, arg, name = ins.opname, ins.arg, ins.argval
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                if op == "LOAD_GLOBAL" and arg is not None and arg & 1 and sys.version_info < (3, 13):
                    push(None)
                ref = _Ref("global", name, resolve_global(name))
                push(ref)
                loaded(ref)
            elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                if name in outer_free:
                    ref = _Ref("free", name, freevals.get(name, _UNKNOWN))
                else:
                    ref = _Ref("local", name)
                push(ref)
                loaded(ref)
            elif op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"):
                push(_Ref("self", name, self_obj) if name == self_name else _Ref("local", name))
            elif op == "LOAD_FAST_LOAD_FAST":
                for n in name:
                    push(_Ref("self", n, self_obj) if n == self_name else _Ref("local", n))
            elif op in ("LOAD_ATTR", "LOAD_METHOD"):
                base = pop()
                ref = _Ref("other", name)
                if isinstance(base, _Ref):
                    obj = _UNKNOWN
                    if base.obj is not _UNKNOWN:
                        try:
                            obj = getattr(base.obj, name)
                        except Exception:  # noqa: BLE001
                            obj = _UNKNOWN
                    ref = _Ref(base.root, f"{base.name}.{name}", obj, base.obj)
                    loaded(ref)
                push(ref)
                if op == "LOAD_METHOD" or (sys.version_info >= (3, 12) and arg is not None and arg & 1):
                    push(None)
            elif op in ("PRECALL", "KW_NAMES", "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS",
                        "MAKE_CELL", "NOT_TAKEN"):
                continue
            elif op == "PUSH_NULL":
                push(None)
            elif op == "CALL":
                argc = arg or 0
                window = stack[-(argc + 2):len(stack) - argc] if len(stack) >= argc + 1 else []
                target = next((r for r in reversed(window) if isinstance(r, _Ref)), None)
                if target is not None:
                    self._call(target, argc, note)
                pop(argc + 2)
                push(_Ref("other", "call result"))
            elif op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                pop(1 if op == "STORE_GLOBAL" else 0)
                note("global_write", f"global {name}")
            elif op in ("STORE_DEREF", "DELETE_DEREF"):
                pop(1 if op == "STORE_DEREF" else 0)
                if name in outer_free:
                    note("nonlocal_write", f"nonlocal {name}")
            elif op == "STORE_ATTR":
                obj, _ = pop(), pop()
                if isinstance(obj, _Ref) and obj.root in ("global", "free", "self"):
                    note("mutation", f"{obj.name}.{name} = ...")
            elif op == "DELETE_ATTR":
                obj = pop()
                if isinstance(obj, _Ref) and obj.root in ("global", "free", "self"):
                    note("mutation", f"del {obj.name}.{name}")
            elif op in ("STORE_SUBSCR", "DELETE_SUBSCR"):
                pop()
                container = pop()
                if op == "STORE_SUBSCR":
                    pop()
                if isinstance(container, _Ref) and container.root in ("global", "free", "self"):
                    note("mutation", f"{container.name}[...] = ...")
            elif op == "BINARY_SUBSCR":
                pop()
                container = pop()
                push(_Ref(container.root, f"{container.name}[]") if isinstance(container, _Ref)
                     else None)
            elif op == "COPY":
                push(stack[-arg] if len(stack) >= arg else None)
            elif op == "SWAP":
                if len(stack) >= arg:
                    stack[-1], stack[-arg] = stack[-arg], stack[-1]
            elif op == "LOAD_CLOSURE":
                push(None)
            else:
                try:
                    effect = dis.stack_effect(ins.opcode, arg, jump=False) if ins.opcode >= dis.HAVE_ARGUMENT \
                        else dis.stack_effect(ins.opcode)
                except (ValueError, TypeError):
                    stack.clear()
                    continue
                if effect < 0:
                    pop(-effect)
                else:
                    for _ in range(effect):
                        push(None)
        for const in code.co_consts:  # nested lambdas, comprehensions, inner functions
            if isinstance(const, types.CodeType):
                inner_free = {n for n in const.co_freevars if n in outer_free}
                self.code(const, globals_, freevals, inner_free, None, _UNKNOWN, module, depth + 1)

    def _call(self, target: _Ref, argc: int, note):
        obj = target.obj
        if obj is _UNKNOWN:
            last = target.name.rsplit(".", 1)[-1]
            if last in MUTATORS and target.root in ("global", "free", "self") and "." in target.name:
                note("mutation", f"{target.name}(...)")
            return
        kind = _classify(obj)
        if kind is not None and kind[0] == "generator_ctor":
            if argc == 0:
                note("unseeded_generator", f"{kind[1]}() without a seed")
            return
        method_name = getattr(obj, "__name__", "")
        parent = target.parent
        if method_name in MUTATORS and target.root in ("global", "free", "self") and parent is not _UNKNOWN \
                and not isinstance(parent, (types.ModuleType, type)) and not callable(parent):
            note("mutation", f"{target.name}(...)")
