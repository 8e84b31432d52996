"""Log bytes read at byte offsets, shown as text: a read may end inside a UTF-8 character, so
the unfinished tail is left for the next read instead of being shown as a replacement mark
(the API's `text` and the job page's tail both decode this way)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    text: str
    next_offset: int  # where the next read starts: after the last complete character


def decode_chunk(data: bytes, offset: int, *, final: bool) -> Piece:
    """Decode `data` read at `offset`. Unless this is the final chunk, up to 3 trailing bytes
    of an unfinished character are not consumed. Invalid bytes show as U+FFFD."""
    keep = len(data) if final else complete_prefix(data)
    return Piece(data[:keep].decode("utf-8", errors="replace"), offset + keep)


def complete_prefix(data: bytes) -> int:
    """Length of `data` without a trailing, possibly unfinished UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:  # ASCII: everything up to here is complete
            return len(data)
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)  # only continuation bytes: invalid anyway, show them
