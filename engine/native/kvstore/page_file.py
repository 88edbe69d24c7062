"""One KV page as a file: a block's K/V and index keys over every layer, checksummed.

    MAGIC (8) | header length (u32 LE) | header (JSON, space-padded) | token ids (int64) | payload
    | checksum (2 x u64 LE)

The header names the model identity, the block hash, its parent's hash and the byte counts; the
checksum covers every byte before it: read as little-endian 64-bit words x_1..x_n, the sums
S1 = sum x_i and S2 = sum i * x_i, both mod 2^64 (Fletcher's checksum on 64-bit words). Any
change of one word changes S1; any change of two words changes S1 or S2 unless both change by
2^63 at an even distance; a truncated or lengthened file is caught by the byte counts. Torn or
garbage sectors, the failure it is for, pass with odds of 2^-64 or less. It is numpy's sums over
the words (about 7 GB/s on the 2-core machine, against zlib.crc32's 1.7 GB/s, which cost more
than reading the page from the page cache: bench/kv_restore_profile.py). Against corruption,
not against a forger: the folder is private to its user. `decode` answers the payload only for a whole, intact page of
this identity that names exactly this prefix (hash, parent and token ids all equal): anything
else raises PageRejected with the reason in a few words, and the caller recomputes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

MAGIC = b"M3KVPG02"  # 01: a crc32 trailer (such pages are "not a page file" now: recomputed)
_U32 = struct.Struct("<I")
_SUM = struct.Struct("<QQ")
_MASK = (1 << 64) - 1
_ROW = 512  # words per row of the sums' two-axis reduction
_MAX_HEADER = 4096
# The header is padded with spaces so that the token ids and the payload start 64-byte aligned
# in the file (and so in a buffer it is read into).
_ALIGN = 64


class PageRejected(Exception):
    """A page file that must not be used; str() is the reason."""


@dataclass(frozen=True, slots=True)
class PageKey:
    """What names a full block: its chained hash, its parent's, and its own token ids (int64
    bytes; compared on every read, so a hash collision is a miss, never a wrong page)."""

    block_hash: bytes
    parent_hash: bytes | None
    token_bytes: bytes

    @property
    def name(self) -> str:
        return self.block_hash.hex()


def _header(identity_key: str, key: PageKey, payload_len: int) -> bytes:
    fields = {
        "model": identity_key,
        "hash": key.block_hash.hex(),
        "parent": key.parent_hash.hex() if key.parent_hash is not None else None,
        "tokens": len(key.token_bytes),
        "payload": payload_len,
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    used = len(MAGIC) + _U32.size + len(text)
    return text + b" " * (-used % _ALIGN)


def encode(
    identity_key: str, key: PageKey, payload: Sequence[memoryview]
) -> tuple[list[memoryview | bytes], int]:
    """The file's parts in order (written one after the other) and their total length."""
    payload_len = sum(p.nbytes for p in payload)
    header = _header(identity_key, key, payload_len)
    head = b"".join((MAGIC, _U32.pack(len(header)), header, key.token_bytes))
    parts: list[memoryview | bytes] = [head, *payload]
    parts.append(checksum(parts))
    return parts, sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)


def checksum(parts: Sequence[memoryview | bytes]) -> bytes:
    """The page's checksum (S1, S2 above) of these parts' bytes, one after the other."""
    s1 = s2 = words = 0
    carry = b""
    for part in parts:
        data: memoryview | bytes = memoryview(part).cast("B")  # a tensor's view has dims
        if carry or len(data) % 8:  # keep the 8-byte words of the whole: rare, small parts
            joined = carry + bytes(data)
            cut = len(joined) // 8 * 8
            data, carry = joined[:cut], joined[cut:]
        t, w = _sums(data)
        s1, s2 = (s1 + t) & _MASK, (s2 + w + words * t) & _MASK
        words += len(data) // 8
    if carry:
        t, w = _sums(carry.ljust(8, b"\0"))
        s1, s2 = (s1 + t) & _MASK, (s2 + w + words * t) & _MASK
    return _SUM.pack(s1, s2)


def _sums(data: memoryview | bytes) -> tuple[int, int]:
    """sum x_i and sum i * x_i (i from 1) over the 64-bit words of data (a multiple of 8
    bytes), mod 2^64: as rows of _ROW words, sum i * x_i = _ROW * sum_r r * rowsum_r +
    sum_c c * colsum_c (r from 0, c from 1)."""
    import numpy

    x = numpy.frombuffer(data, dtype="<u8")
    rows = x.size // _ROW
    total = weighted = 0
    if rows:
        grid = x[: rows * _ROW].reshape(rows, _ROW)
        by_row, by_col = grid.sum(axis=1), grid.sum(axis=0)
        total = int(by_row.sum())
        weighted = _ROW * int(numpy.arange(rows, dtype="<u8") @ by_row) + int(
            numpy.arange(1, _ROW + 1, dtype="<u8") @ by_col
        )
    rest = x[rows * _ROW :]
    if rest.size:
        total += int(rest.sum())
        weighted += int(numpy.arange(rows * _ROW + 1, x.size + 1, dtype="<u8") @ rest)
    return total & _MASK, weighted & _MASK


def decode(data: memoryview, identity_key: str, key: PageKey, payload_len: int) -> memoryview:
    """The payload of an intact page of this identity naming this prefix; else PageRejected."""
    fixed = len(MAGIC) + _U32.size
    if len(data) < fixed + _U32.size or bytes(data[: len(MAGIC)]) != MAGIC:
        raise PageRejected("not a page file" if len(data) >= fixed else "truncated")
    (hlen,) = _U32.unpack_from(data, len(MAGIC))
    if hlen > _MAX_HEADER or len(data) < fixed + hlen:
        raise PageRejected("truncated" if hlen <= _MAX_HEADER else "corrupt header")
    try:
        header = json.loads(bytes(data[fixed : fixed + hlen]))
        tokens_len, stored_payload = int(header["tokens"]), int(header["payload"])
    except (ValueError, KeyError, TypeError):
        raise PageRejected("corrupt header") from None
    end = fixed + hlen + tokens_len + stored_payload
    if len(data) != end + _SUM.size:
        raise PageRejected("truncated" if len(data) < end + _SUM.size else "trailing bytes")
    if checksum([data[:end]]) != bytes(data[end:]):
        raise PageRejected("checksum mismatch")
    if header.get("model") != identity_key:
        raise PageRejected("written by another model or engine version")
    if stored_payload != payload_len:
        raise PageRejected("another cache layout")
    parent = key.parent_hash.hex() if key.parent_hash is not None else None
    if header.get("hash") != key.block_hash.hex() or header.get("parent") != parent:
        raise PageRejected("names another prefix")
    tokens_at = fixed + hlen
    if data[tokens_at : tokens_at + tokens_len] != key.token_bytes:
        raise PageRejected("names other tokens (a hash collision)")
    return data[tokens_at + tokens_len : end]
