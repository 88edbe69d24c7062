"""Small helpers shared by the file tools."""

from __future__ import annotations


def looks_binary(head: bytes) -> bool:
    return b"\x00" in head
