"""CRC32C as TFRecord framing uses it: the C implementation for payloads, numpy for many length headers.

TFRecord stores ``masked(crc32c(x))`` with ``masked(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8 (mod 2**32)``
so that a CRC of data that itself contains CRCs does not look like a valid one.
"""

from __future__ import annotations

import google_crc32c
import numpy as np

crc32c = google_crc32c.value  # C (SSE4.2 where available); takes bytes, not memoryview

_MASK_DELTA = 0xA282EAD8
_POLY = 0x82F63B78  # Castagnoli, bit-reflected


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    return mask(crc32c(data))


def mask_array(crcs: np.ndarray) -> np.ndarray:
    c = crcs.astype(np.uint32)
    return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _byte_table()


def masked_crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """``masked(crc32c(row))`` for every row of a ``(n, k)`` uint8 array, byte by byte across all rows at
    once: checking a block's length headers costs k numpy steps instead of n C calls."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _TABLE[(crc ^ rows[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return mask_array(crc ^ np.uint32(0xFFFFFFFF))


def masked_crc32c_many(payloads: list) -> np.ndarray:
    """``masked(crc32c(p))`` for every bytes object in ``payloads`` (one C call each, no Python frame)."""
    return mask_array(np.fromiter(map(crc32c, payloads), dtype=np.uint32, count=len(payloads)))
