"""Shared by both sides of tests/formats/fuzz_formats_differential.py: JSON-safe encoding of case data and a
normalised form of results. numpy and the standard library only: it is imported by the jaxfeed driver and by
the TensorFlow worker (a different Python that has no jaxfeed). Not a pytest module."""

from __future__ import annotations

import numpy as np


def enc(x):
    """bytes -> {"__b": hex}, recursively, so a case survives JSON."""
    if isinstance(x, (bytes, bytearray)):
        return {"__b": bytes(x).hex()}
    if isinstance(x, dict):
        return {k: enc(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [enc(v) for v in x]
    return x


def dec(x):
    if isinstance(x, dict):
        if set(x) == {"__b"}:
            return bytes.fromhex(x["__b"])
        return {k: dec(v) for k, v in x.items()}
    if isinstance(x, list):
        return [dec(v) for v in x]
    return x


def norm_array(a) -> dict:
    """An array (or scalar) as {"dtype", "shape", "v"}: strings as hex (each element must be ``bytes``),
    floats as their bit patterns (so NaN payloads and -0.0 are compared too)."""
    if isinstance(a, (bytes, bytearray)):
        return {"shape": [], "dtype": "string", "v": [bytes(a).hex()]}
    if isinstance(a, str):
        return {"shape": [], "dtype": "!str", "v": [a]}
    a = np.asarray(a)
    out = {"shape": list(a.shape)}
    if a.dtype.kind in "SU":  # numpy fixed-width strings strip trailing NUL bytes: flag them
        out["dtype"] = "!numpy-" + a.dtype.str
        out["v"] = [repr(e) for e in a.reshape(-1).tolist()]
        return out
    flat = a.reshape(-1)
    if a.dtype == object:
        out["dtype"] = "string"
        v = []
        for e in flat.tolist():
            if isinstance(e, bytes):
                v.append(e.hex())
            else:  # a str or anything else where bytes were promised
                v.append("!%s:%r" % (type(e).__name__, e))
        out["v"] = v
    elif a.dtype.kind == "f":
        out["dtype"] = a.dtype.name
        bits = {4: np.uint32, 8: np.uint64, 2: np.uint16}[a.dtype.itemsize]
        out["v"] = [int(b) for b in np.ascontiguousarray(flat).view(bits).tolist()]
    else:
        out["dtype"] = a.dtype.name
        out["v"] = [int(b) if not isinstance(b, bool) else bool(b) for b in flat.tolist()]
    return out


def norm_sparse(indices, values, dense_shape) -> dict:
    return {"sparse": True, "indices": norm_array(indices), "values": norm_array(values),
            "dense_shape": norm_array(dense_shape)}


def norm_error(e: BaseException) -> dict:
    mro = [c.__name__ for c in type(e).__mro__]
    msg = str(e)
    if msg.startswith("{{function_node"):  # TF's eager prefix
        msg = msg.split("}}", 1)[-1].strip()
    return {"error": type(e).__name__, "mro": mro, "msg": msg[:400]}
