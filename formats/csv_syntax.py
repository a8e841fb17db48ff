"""TF's CSV syntax, for ``CsvDataset``'s row-by-row path (``csv.py``): how TF splits a file into records and
fields (``records``) and reads a number field (``parse_int``, ``parse_float``: strtol/strtod semantics), and
two whole-file checks that tell where pyarrow's reading may differ from it (``quotes_are_plain``,
``has_hex_field``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import numpy as np

# ---------------------------------------------------------------------- TF's field syntax (the row-by-row path)
# TF parses numbers with strtol/strtod semantics on the field's bytes: C white space around the number, ASCII
# digits only (no ``_``, no other scripts), ints in base 10 with an optional sign; floats in decimal or hex
# (``0x1p3``), ``inf``/``infinity``/``nan``/``nan(payload)`` in any case; float32 rounds once, from the text.
_SPACE = b" \t\n\v\f\r"
_INT_RE = re.compile(rb"[+-]?[0-9]+")
_FLOAT_RE = re.compile(rb"""(?P<sign>[+-]?)(?:
    (?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | 0[xX](?P<hex>(?P<hm>[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP](?P<hexp>[+-]?[0-9]+))?)
  | (?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)
  | [nN][aA][nN](?:\((?P<payload>[0-9A-Za-z_]*)\))?)""", re.X)
_NAN_PAYLOAD_RE = re.compile(rb"0[xX](?P<hex>[0-9a-fA-F]+)|(?P<oct>0[0-7]*)|(?P<dec>[1-9][0-9]*)")
_NAN_BITS = {np.dtype(np.float32): (np.uint32, 0x7FC00000, (1 << 22) - 1, 31),
             np.dtype(np.float64): (np.uint64, 0x7FF8000000000000, (1 << 51) - 1, 63)}


def parse_int(raw: bytes, dtype):
    """The int TF's safe_strto32/64 reads from ``raw``, or None."""
    text = raw.strip(_SPACE)
    if _INT_RE.fullmatch(text) is None:
        return None
    value = int(text)
    info = np.iinfo(dtype)
    return dtype.type(value) if info.min <= value <= info.max else None


def _nan(sign: bool, payload, dtype):
    """strtod's NaN: ``nan(n)`` keeps ``n`` (read as strtoull, base 0) in the low mantissa bits."""
    uint, quiet, mask, sign_bit = _NAN_BITS[dtype]
    bits = quiet
    m = _NAN_PAYLOAD_RE.fullmatch(payload) if payload else None
    if m is not None:
        n = int(m["hex"], 16) if m["hex"] else int(m["oct"], 8) if m["oct"] else int(m["dec"])
        bits |= min(n, (1 << 64) - 1) & mask
    if sign:
        bits |= 1 << sign_bit
    return np.array(bits, uint).view(dtype)[()]


def _exact(m) -> Fraction:
    """The exact value of a decimal or hex float's digits (without its sign)."""
    if m["dec"] is not None:
        return Fraction(Decimal(m["dec"].decode("ascii")))
    whole, _, frac = m["hm"].decode("ascii").partition(".")
    value = Fraction(int((whole + frac) or "0", 16), 16 ** len(frac))
    return value * Fraction(2) ** int(m["hexp"] or 0)


def parse_float(raw: bytes, dtype):
    """The float TF's safe_strtof/strtod reads from ``raw``, or None."""
    m = _FLOAT_RE.fullmatch(raw.strip(_SPACE))
    if m is None:
        return None
    negative = m["sign"] == b"-"
    if m["inf"] is not None:
        return dtype.type(-np.inf if negative else np.inf)
    if m["dec"] is None and m["hex"] is None:
        return _nan(negative, m["payload"], dtype)
    if m["dec"] is not None:
        value = float(m["dec"])  # correctly rounded to float64 (only ASCII digits reach here)
    else:
        try:
            value = float.fromhex(m["hex"].decode("ascii"))
        except OverflowError:
            value = np.inf
    if dtype == np.dtype(np.float32):
        with np.errstate(over="ignore"):
            single = np.float32(value)
            if float(single) != value and np.float32(np.nextafter(value, -np.inf)) != \
                    np.float32(np.nextafter(value, np.inf)):
                # ``value`` is halfway between two float32s: rounding it again would round twice;
                # the text itself decides (TF's strtof rounds once)
                exact = _exact(m)
                if exact != Fraction(value):
                    single = np.float32(np.nextafter(value, np.inf if exact > Fraction(value) else -np.inf))
        value = single
    return dtype.type(-value if negative else value)


# ---------------------------------------------------------------------- TF's record syntax
_UNQUOTED_QUOTE = "Unquoted fields cannot have quotes inside"
_BAD_QUOTE = "Quote inside a string has to be escaped by another quote"
_UNCLOSED = "Reached end of file without closing quoted field in record"


def records(data: bytes, delim: bytes, use_quote: bool, pos: int = 0):
    """TF's CSV records from ``pos``: each a list of ``(field bytes, syntax error or None)`` (a field with an
    error has bytes None). As TF: ``\\n``, ``\\r`` and ``\\r\\n`` end a record; an empty line is a record of one
    empty field; a field after a delimiter at the end of the file is empty; a quoted field keeps its newlines
    and ``""`` stands for ``"``; a quote in an unquoted field, or a closing quote not followed by a delimiter,
    a newline or the end, is an error (the record still ends where TF ends it)."""
    n = len(data)
    special = re.compile(b"[" + re.escape(delim) + b"\r\n" + (b'"' if use_quote else b"") + b"]")
    d, quote, nl, cr = delim[0], 0x22, 0x0A, 0x0D
    while pos < n:
        fields, end = [], False
        while not end:
            if pos >= n:  # the file ends right after a delimiter: one more, empty field
                fields.append((b"", None))
                break
            if use_quote and data[pos] == quote:
                start, error, scan = pos + 1, None, pos + 1
                while True:
                    q = data.find(b'"', scan)
                    if q < 0:  # TF returns this one over an earlier error in the field
                        fields.append((None, _UNCLOSED))
                        pos, end = n, True
                        break
                    if q + 1 >= n:
                        value, pos, end = data[start:q], n, True
                    else:
                        c = data[q + 1]
                        if c == d:
                            value, pos = data[start:q], q + 2
                        elif c == nl or c == cr:
                            value, pos, end = data[start:q], q + 2, True
                            if c == cr and pos < n and data[pos] == nl:
                                pos += 1
                        else:
                            if c != quote:
                                error = error or _BAD_QUOTE
                            scan = q + 2
                            continue
                    fields.append((None, error) if error else (value.replace(b'""', b'"'), None))
                    break
            else:
                start, error, scan = pos, None, pos
                while True:
                    m = special.search(data, scan)
                    if m is None:
                        fields.append((None, error) if error else (data[start:], None))
                        pos, end = n, True
                        break
                    i = m.start()
                    c = data[i]
                    if c == d:
                        pos = i + 1
                    elif c == nl or c == cr:
                        pos, end = i + 1, True
                        if c == cr and pos < n and data[pos] == nl:
                            pos += 1
                    else:  # a quote: an error, and the field goes on
                        error = error or _UNQUOTED_QUOTE
                        scan = i + 1
                        continue
                    fields.append((None, error) if error else (data[start:i], None))
                    break
        yield fields


def quotes_are_plain(data: bytes, delim: bytes) -> bool:
    """Whether every ``"`` in ``data`` belongs to a well-formed quoted field (one that starts a field, ends
    before a delimiter, a newline or the end, with ``""`` inside): then pyarrow reads it as TF does. Quotes
    pair up in order; an opening quote must follow a field start or close the pair before it (``""``),
    a closing one must precede a field end or open the next pair. Vectorised: one pass over the quotes."""
    arr = np.frombuffer(data, np.uint8)
    q = np.flatnonzero(arr == 0x22)
    if q.size % 2:
        return False
    opens, closes = q[0::2], q[1::2]
    ends = np.zeros(256, bool)
    ends[[delim[0], 0x0A, 0x0D]] = True
    before = np.ones(opens.size, bool)
    inner = opens > 0
    before[inner] = ends[arr[opens[inner] - 1]]
    before[1:] |= opens[1:] == closes[:-1] + 1
    after = np.ones(closes.size, bool)
    inner = closes < arr.size - 1
    after[inner] = ends[arr[closes[inner] + 1]]
    after[:-1] |= closes[:-1] + 1 == opens[1:]
    return bool(before.all() and after.all())


def has_hex_field(data: bytes, delim: bytes) -> bool:
    """Whether a field may be a hex integer (``0x10``), which pyarrow reads as an int and TF refuses."""
    if b"0x" not in data and b"0X" not in data:
        return False
    return re.search(rb"(?:\A|[" + re.escape(delim) + rb"\r\n])[ \t]*\"?[ \t]*0[xX]", data) is not None
