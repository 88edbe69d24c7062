"""One KV page as a file: a block's K/V and index keys over every layer, checksummed.

    MAGIC (8) | header length (u32 LE) | header (JSON, space-padded) | token ids (int64) | payload
    | crc32 (u32 LE)

The header names the model identity, the block hash, its parent's hash and the byte counts; the
crc32 covers every byte before it. `decode` answers the payload only for a whole, intact page of
this identity that names exactly this prefix (hash, parent and token ids all equal): anything
else raises PageRejected with the reason in a few words, and the caller recomputes.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

MAGIC = b"M3KVPG01"
_U32 = struct.Struct("<I")
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
    parts: list[memoryview | bytes] = [MAGIC, _U32.pack(len(header)), header, key.token_bytes]
    parts.extend(payload)
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    parts.append(_U32.pack(crc))
    return parts, sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)


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
    if len(data) != end + _U32.size:
        raise PageRejected("truncated" if len(data) < end + _U32.size else "trailing bytes")
    (crc,) = _U32.unpack_from(data, end)
    if zlib.crc32(data[:end]) != crc:
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
