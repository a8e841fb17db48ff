"""Whether a ``from_generator`` function, or a map function AUTOTUNE would move, may run in a worker process
without anyone noticing the move (``executor_choice``: the interleave's slots and the map's executor).

A worker calls a copy of the function (cloudpickle: by value for one defined in ``__main__`` or locally, by
reference for one in an importable module, whose module the worker imports afresh). Whatever the function
changes outside itself -- a global it assigns, a ``nonlocal`` it rebinds, a list it appends to, an object's
attribute -- would then change in the worker's copy, and the user's process would never see it: a value
changed silently. So a generator goes to a worker only when nothing it can reach says otherwise:

- it is a plain Python function (not a bound method -- its object is state --, a callable object, a
  ``functools.partial`` or a builtin);
- its code, and the code of the functions nested in it, assigns no global and rebinds no ``nonlocal``;
- every global it reads, every closure cell and every default argument holds a value that cannot be changed
  in place: numbers, strings, bytes, None, tuples and frozensets of such values, modules, classes and
  builtins -- or a plain function of the same module, checked the same way (to ``MAX_DEPTH``). A list, a
  dict, a set, an array or any other object keeps the generator here;
- (its arguments, ``from_generator(..., args=...)``, are data already -- arrays, bytes, numbers -- and travel
  as copies.)

The check is conservative: a generator that only reads a global list stays here although it could have
moved. ``safety_reason`` says why in words (``explain``).
"""

from __future__ import annotations

import builtins
import dis
import types

MAX_DEPTH = 3  # functions of the same module followed from the generator

_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), range, type(Ellipsis))
_WRITES_GLOBAL = {"STORE_GLOBAL", "DELETE_GLOBAL"}
_WRITES_CELL = {"STORE_DEREF", "DELETE_DEREF"}


def safety_reason(generator, what: str = "generator") -> str | None:
    """Why ``generator`` (a ``what``: "generator", "function") must stay in this process (see the module doc),
    or None when it may move."""
    if not isinstance(generator, types.FunctionType):
        return f"{what} {_name(generator)} is not a plain function (its object may hold state)"
    return _function_reason(generator, generator.__module__, MAX_DEPTH, set())


def _name(obj) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def _function_reason(fn, module: str, depth: int, seen: set) -> str | None:
    if id(fn) in seen:
        return None
    seen.add(id(fn))
    code = fn.__code__
    reason = _code_reason(code, fn)
    if reason is not None:
        return reason
    for name in _globals_read(code):
        if name in fn.__globals__:
            value = fn.__globals__[name]
        elif hasattr(builtins, name):
            continue
        else:
            continue  # not defined yet: a NameError in either process
        why = _value_reason(value, module, depth, seen)
        if why is not None:
            return f"{_name(fn)} reads the global {name!r}: {why}"
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        why = _value_reason(value, module, depth, seen)
        if why is not None:
            return f"{_name(fn)} closes over {name!r}: {why}"
    defaults = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for value in defaults:
        why = _value_reason(value, module, depth, seen)
        if why is not None:
            return f"{_name(fn)} has a default argument that {why}"
    return None


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _code_reason(code, fn) -> str | None:
    for c in _codes(code):
        for ins in dis.get_instructions(c):
            if ins.opname in _WRITES_GLOBAL:
                return f"{_name(fn)} assigns the global {ins.argval!r}"
            if ins.opname in _WRITES_CELL and ins.argval in code.co_freevars:
                return f"{_name(fn)} rebinds the nonlocal {ins.argval!r}"
    return None


def _globals_read(code) -> list:
    names = []
    for c in _codes(code):
        names += [ins.argval for ins in dis.get_instructions(c) if ins.opname == "LOAD_GLOBAL"]
    return list(dict.fromkeys(names))


def _value_reason(value, module: str, depth: int, seen: set) -> str | None:
    """Why ``value`` is state a worker's copy would hide, or None."""
    if isinstance(value, _IMMUTABLE) or isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
        return None
    if isinstance(value, (tuple, frozenset)):
        for item in value:
            why = _value_reason(item, module, depth, seen)
            if why is not None:
                return why
        return None
    if isinstance(value, types.FunctionType):
        if value.__module__ != module:
            return None  # another module's function: imported by reference, its module's own business
        if depth <= 0:
            return f"holds {_name(value)}, a function nested too deep to check"
        return _function_reason(value, module, depth - 1, seen)
    return f"holds a {type(value).__name__}, which can change in place"
