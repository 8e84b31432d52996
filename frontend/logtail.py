"""Log chunks read at byte offsets, shown as text: a chunk may end inside a UTF-8 character, so
the incomplete tail is left for the next read instead of being shown as a replacement mark."""

from __future__ import annotations

from dataclasses import dataclass

CHUNK = 256 * 1024  # per poll; a long log is caught up on in reads of this size


@dataclass(frozen=True)
class Piece:
    text: str
    next_offset: int  # where the next read starts: after the last complete character


def decode_chunk(data: bytes, offset: int, *, final: bool) -> Piece:
    """Decode `data` read at `offset`. Unless this is the final chunk, up to 3 trailing bytes
    of an unfinished character are not consumed. Invalid bytes show as U+FFFD."""
    keep = len(data) if final else _complete_prefix(data)
    return Piece(data[:keep].decode("utf-8", errors="replace"), offset + keep)


def _complete_prefix(data: bytes) -> int:
    """Length of `data` without a trailing, possibly unfinished UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:  # ASCII: everything up to here is complete
            return len(data)
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)  # only continuation bytes: invalid anyway, show them
