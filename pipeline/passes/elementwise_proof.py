"""Proof, from a function's bytecode, that it is elementwise: ``f(stack(xs))`` equals ``stack([f(x) for x
in xs])`` bit for bit, for inputs of the given dtypes and ranks. The vectorized_map pass then runs such a
map once per batch, as if the user had declared ``vectorized=True`` (a ported ``map(lambda x: x + 1)``
costs no Python call per element).

Only what can be proven is accepted; anything else is "not proven" and the map stays per element:

- a plain Python function (``def`` or ``lambda``) with exactly one positional parameter per argument, no
  defaults used, no closure, no globals, no attributes, no calls, no branches, no in-place operators;
- straight-line code of parameter and local loads, number constants (int, float, bool), unary ``- + ~``,
  binary arithmetic and comparisons, local stores, and a returned value or (nested) tuple of values that
  each depend on an argument (a constant result would not gain the batch dimension);
- on Python 3.11 (whose call bytecode this module models), also calls of a few exact numpy functions on a
  value -- ``np.abs`` (and the builtin ``abs``), ``np.sqrt``, ``np.square``, ``np.floor``, ``np.ceil``,
  ``np.trunc`` -- and casts, ``x.astype(np.float32)`` / ``x.astype("float32")`` / ``np.float32(x)``, except
  from floating point to integers (NaN and out-of-range values are undefined there, and numpy's scalar and
  array casts need not agree); ``np`` must be the numpy module itself in the function's globals;
- numeric arguments (bool, integers, float16/32/64; not complex or long double, whose scalar and array
  loops may round differently);
- floating-point results only through ``+ - * /`` and comparisons, which IEEE 754 rounds exactly whatever
  loop computes them (``//``, ``%`` and ``**`` on floats call library routines that numpy's scalar and
  array paths need not share); integer results through any of ``+ - * / // % ** & | ^ << >>``;
- two argument-derived operands of one operator only when their ranks are equal and known: then numpy
  broadcasts the batch exactly as it broadcasts each element (a rank-0 leaf beside a rank-1 leaf would be
  aligned with the batch dimension instead).

Result dtypes follow NEP 50 alike for numpy scalars and arrays (a Python constant is "weak"), and are found
by running each operator on empty arrays, so an operator numpy refuses for the dtypes (``-`` on bool, a
constant out of an integer's range) is not proven either. What remains different is not a value: numpy
warns of integer overflow for scalars only (both wrap); the fused stage re-runs a batch element by element
when numpy is set to raise, or a warning filter turns ``RuntimeWarning`` into errors
(``iterators/map_batch.py``), and whenever the batched call raises.
"""

from __future__ import annotations

import builtins
import dis
import operator
import sys
import types
from dataclasses import dataclass

import numpy as np

_BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
}
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
            ">": operator.gt, ">=": operator.ge}
_UNARY = {"UNARY_NEGATIVE": ("-x", operator.neg), "UNARY_INVERT": ("~x", operator.invert),
          "UNARY_POSITIVE": ("+x", operator.pos)}
_NUMERIC = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64))
# numpy functions that are exact on every numeric dtype (sqrt: IEEE 754 rounds it correctly, like + - * /)
_EXACT_CALLS = {np.absolute: "abs", abs: "abs", np.sqrt: "sqrt", np.square: "square", np.floor: "floor",
                np.ceil: "ceil", np.trunc: "trunc"}
_CASTS = {np.dtype(t).type: np.dtype(t) for t in _NUMERIC}
# Exact on floats: IEEE 754 rounds + - * / correctly, so any loop gives the same bits; signs and comparisons
# do not round at all.
_EXACT_ON_FLOATS = frozenset({"+", "-", "*", "/", "-x", "+x", "~x", "cast"} | set(_COMPARE) |
                             set(_EXACT_CALLS.values()))
_CALLS_MODELLED = sys.version_info[:2] == (3, 11)  # LOAD_METHOD / PRECALL / CALL and their stack layout
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
_PAIR_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
_NO_EFFECT = frozenset({"RESUME", "NOP", "CACHE"})
# CO_VARARGS, CO_VARKEYWORDS, CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
_REJECT_FLAGS = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


class NotProven(Exception):
    """Why the function is not provably elementwise (kept for ``explain()``)."""


@dataclass(frozen=True)
class Leaf:
    """An argument-derived value: one numpy dtype, and a rank (None: unknown) without the batch dimension."""
    dtype: np.dtype
    rank: int | None

    def empty(self):
        return np.empty((0,) * (1 if self.rank is None else self.rank + 1), self.dtype)


@dataclass(frozen=True)
class Const:
    """A Python number the function holds: the same in every call."""
    value: object


def prove_elementwise(fn, args) -> tuple:
    """The structure of ``fn``'s result -- a Leaf or nested tuples of Leaves -- given the Leaves of its
    positional arguments; raises NotProven with the reason when the proof fails."""
    if type(fn) is not types.FunctionType:
        raise NotProven(f"not a plain Python function ({type(fn).__name__})")
    code = fn.__code__
    if code.co_flags & _REJECT_FLAGS or code.co_kwonlyargcount or code.co_freevars or code.co_cellvars:
        raise NotProven("takes *args/**kwargs or keyword-only arguments, is a generator, or has a closure")
    if code.co_argcount != len(args):
        raise NotProven(f"takes {code.co_argcount} positional parameters for {len(args)} argument(s)")
    for a in args:
        if not isinstance(a, Leaf) or a.dtype not in _NUMERIC:
            raise NotProven(f"an argument is not a numeric leaf ({a})")
    # Every epoch's iterator runs the passes: a proof (26-170 us) is kept per code, argument leaves and what
    # the code's names are bound to now (so rebinding ``np`` is not missed).
    scope = fn.__globals__
    key = (code, args, tuple(id(scope.get(name)) for name in code.co_names))
    known = _PROOFS.get(key)
    if known is None:
        try:
            known = _run(dis.get_instructions(fn), dict(zip(code.co_varnames, args)), fn)
        except NotProven as why:
            known = why
        if len(_PROOFS) >= _PROOFS_KEPT:
            _PROOFS.clear()
        _PROOFS[key] = known
    if isinstance(known, NotProven):
        raise NotProven(*known.args)
    return known


_PROOFS: dict = {}
_PROOFS_KEPT = 512


@dataclass(frozen=True)
class Named:
    """A module-level object the function names: numpy, one of its functions or scalar types, or ``abs``."""
    value: object


@dataclass(frozen=True)
class Method:
    """``leaf.astype`` loaded for a call (LOAD_METHOD pushes it under the leaf, as ``self``)."""
    name: str


_NULL = object()  # what LOAD_GLOBAL pushes below a function it loads for a call (``NULL + np``)


def _run(instructions, env, fn):
    stack: list = []
    for ins in instructions:
        op = ins.opname
        if op in _NO_EFFECT or (op == "PRECALL" and _CALLS_MODELLED):
            continue
        if _CALLS_MODELLED and op in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "CALL"):
            _call_step(ins, stack, fn)
            continue
        if op in _LOADS:
            stack.append(_local(env, ins.argval))
        elif op in _PAIR_LOADS:
            stack.extend(_local(env, name) for name in ins.argval)
        elif op == "LOAD_CONST" or op == "LOAD_SMALL_INT":
            stack.append(_const(ins.argval))
        elif op == "STORE_FAST":
            env[ins.argval] = stack.pop()
        elif op == "STORE_FAST_LOAD_FAST":
            store, load = ins.argval
            env[store] = stack.pop()
            stack.append(_local(env, load))
        elif op == "STORE_FAST_STORE_FAST":
            for name in ins.argval:
                env[name] = stack.pop()
        elif op in _UNARY:
            stack.append(_apply(_UNARY[op][1], _UNARY[op][0], stack.pop()))
        elif op == "CALL_INTRINSIC_1" and ins.argrepr == "INTRINSIC_UNARY_POSITIVE":  # Python 3.12+
            stack.append(_apply(operator.pos, "+x", stack.pop()))
        elif op == "BINARY_OP" and ins.argrepr in _BINARY:
            right, left = stack.pop(), stack.pop()
            stack.append(_apply(_BINARY[ins.argrepr], ins.argrepr, left, right))
        elif op == "COMPARE_OP" and ins.argrepr in _COMPARE:
            right, left = stack.pop(), stack.pop()
            stack.append(_apply(_COMPARE[ins.argrepr], ins.argrepr, left, right))
        elif op == "BUILD_TUPLE":
            items = tuple(stack[len(stack) - ins.arg:]) if ins.arg else ()
            del stack[len(stack) - ins.arg:]
            stack.append(items)
        elif op == "RETURN_VALUE":
            return _result(stack.pop())
        else:
            raise NotProven(f"uses {op} {ins.argrepr}".rstrip())
    raise NotProven("has no return")  # (unreachable for compiled Python code)


def _call_step(ins, stack, fn):
    """One step of Python 3.11's call bytecode: ``np.sqrt(x)`` is LOAD_GLOBAL (NULL + np), LOAD_ATTR sqrt,
    LOAD_FAST x, PRECALL 1, CALL 1 where the module imports numpy as ``np``, else LOAD_GLOBAL np, LOAD_METHOD
    sqrt, ...; ``x.astype(t)`` is LOAD_FAST x, LOAD_METHOD astype, (t), PRECALL 1, CALL 1."""
    op = ins.opname
    if op == "LOAD_GLOBAL":
        if ins.arg & 1:
            stack.append(_NULL)
        stack.append(_named(fn, ins.argval))
    elif op == "LOAD_ATTR":
        owner = stack.pop()
        if not (isinstance(owner, Named) and owner.value is np):
            raise NotProven(f"reads the attribute {ins.argval!r} of a value (only numpy's own are followed)")
        stack.append(_allowed(getattr(np, ins.argval, None), f"np.{ins.argval}"))
    elif op == "LOAD_METHOD":  # a module's function: (NULL, function); a value's method: (method, value)
        owner = stack.pop()
        if isinstance(owner, Named) and owner.value is np:  # (np.f(x) where np is not imported in the module)
            stack.extend((_NULL, _allowed(getattr(np, ins.argval, None), f"np.{ins.argval}")))
        elif isinstance(owner, Leaf) and ins.argval == "astype":
            stack.extend((Method("astype"), owner))
        else:
            raise NotProven(f"calls the method {ins.argval!r} (only astype is followed)")
    else:  # CALL n
        n = ins.arg
        call_args = stack[len(stack) - n:] if n else []
        del stack[len(stack) - n:]
        self_or_callee, callee_or_null = stack.pop(), stack.pop()
        if callee_or_null is _NULL:
            callee = self_or_callee
        else:
            callee, call_args = callee_or_null, [self_or_callee] + call_args
        stack.append(_call(callee, call_args))


def _named(fn, name):
    """What a global name of ``fn`` is bound to now, if it is one the proof follows."""
    scope = fn.__globals__
    if name in scope:
        value = scope[name]
    else:
        space = fn.__builtins__ if isinstance(fn.__builtins__, dict) else vars(builtins)
        value = space.get(name)
    if value is np:
        return Named(np)
    return _allowed(value, name)


def _allowed(value, name):
    try:
        if value in _EXACT_CALLS or value in _CASTS:
            return Named(value)
    except TypeError:  # (unhashable)
        pass
    raise NotProven(f"uses {name}, which the proof does not follow")


def _call(callee, args):
    if len(args) != 1 and not isinstance(callee, Method):
        raise NotProven(f"calls a function with {len(args)} arguments")
    if isinstance(callee, Method):  # leaf.astype(dtype)
        if len(args) != 2:
            raise NotProven("calls astype with other than one argument")
        leaf, target = args
        if isinstance(target, Named) and target.value in _CASTS:
            dtype = _CASTS[target.value]
        elif isinstance(target, Const) and type(target.value) is str:
            try:
                dtype = np.dtype(target.value)
            except TypeError:
                raise NotProven(f"casts to {target.value!r}, not a dtype") from None
        else:
            raise NotProven("casts to something other than a numpy scalar type or a dtype name")
        return _cast(leaf, dtype, lambda v: v.astype(dtype))
    if not isinstance(callee, Named) or callee.value is np:
        raise NotProven("calls something other than a followed numpy function")
    fn = callee.value
    if fn in _CASTS:  # np.float32(x)
        return _cast(args[0], _CASTS[fn], fn)
    return _apply(fn, _EXACT_CALLS[fn], args[0])


def _cast(value, dtype, convert):
    if not isinstance(value, Leaf):
        raise NotProven("casts a constant or a tuple (only argument-derived values are followed)")
    if dtype not in _NUMERIC:
        raise NotProven(f"casts to {dtype}")
    if value.dtype.kind == "f" and dtype.kind in "iu":
        raise NotProven(f"casts {value.dtype} to {dtype} (NaN and out-of-range floats are undefined there)")
    return _apply(convert, "cast", value)


def _local(env, name):
    if name not in env:
        raise NotProven(f"reads {name!r} before it is set")
    return env[name]


def _const(value):
    if type(value) not in (int, float, bool, str):  # (a str is only followed as a dtype name: see _call)
        raise NotProven(f"holds the constant {value!r}, not a Python number")
    return Const(value)


def _apply(fn, symbol, *operands):
    for o in operands:
        if not isinstance(o, (Leaf, Const)) or (isinstance(o, Const) and type(o.value) is str):
            raise NotProven(f"applies {symbol} to {type(o.value if isinstance(o, Const) else o).__name__}")
    leaves = [o for o in operands if isinstance(o, Leaf)]
    values = [o.empty() if isinstance(o, Leaf) else o.value for o in operands]
    if not leaves:  # constants only: the same Python arithmetic in every call
        if symbol in ("**", "<<") and abs(values[-1]) > 64:
            raise NotProven(f"{symbol} of constants with a large right operand")  # (Python ints grow)
        try:
            with np.errstate(all="ignore"):
                return _const(fn(*values))
        except Exception as e:  # noqa: BLE001 - would raise in every call: not worth proving
            raise NotProven(f"{symbol} of constants raises {type(e).__name__}") from None
    ranks = {leaf.rank for leaf in leaves}
    if len(leaves) == 2 and (len(ranks) != 1 or None in ranks):
        raise NotProven(f"applies {symbol} to two values of ranks {sorted(ranks, key=str)} (broadcasting a "
                        "batch differs from broadcasting its elements unless the ranks are equal and known)")
    # The result dtype of the operator on a batch (empty arrays), and on one element (numpy scalars): numpy's
    # scalar paths do not always resolve as its array loops do (bool ** 2 is int64 on scalars, int8 on arrays)
    scalars = [o.dtype.type(1) if isinstance(o, Leaf) and o.rank == 0 else v for o, v in zip(operands, values)]
    try:
        with np.errstate(all="ignore"):  # (a constant may overflow the dtype: per element it does so too)
            out, one = np.asarray(fn(*values)), np.asarray(fn(*scalars))
    except Exception as e:  # noqa: BLE001 - numpy refuses these dtypes: leave it to the per-element path
        raise NotProven(f"{symbol} on {[str(v.dtype) for v in leaves]} raises {type(e).__name__}") from None
    if one.dtype != out.dtype:
        raise NotProven(f"{symbol} on {[str(v.dtype) for v in leaves]} gives {one.dtype} per element but "
                        f"{out.dtype} on a batch")
    if out.dtype not in _NUMERIC:
        raise NotProven(f"{symbol} gives {out.dtype}")
    floating = out.dtype.kind == "f" or any(v.dtype.kind == "f" for v in leaves) or \
        any(type(o) is Const and type(o.value) is float for o in operands)
    if floating and symbol not in _EXACT_ON_FLOATS:
        raise NotProven(f"{symbol} on floating-point values (not one IEEE-rounded operation)")
    return Leaf(out.dtype, leaves[0].rank)


def _result(value):
    if isinstance(value, Const):
        raise NotProven("returns a constant (it would not gain the batch dimension)")
    if type(value) is tuple:
        if not value:
            raise NotProven("returns an empty tuple")
        return tuple(_result(v) for v in value)
    return value
