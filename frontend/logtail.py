"""Log chunks read at byte offsets, shown as text (queue_service.jobs.logtext: a chunk may end
inside a UTF-8 character, so the incomplete tail is left for the next read)."""

from __future__ import annotations

from queue_service.jobs.logtext import Piece, decode_chunk

__all__ = ["CHUNK", "TAIL", "Piece", "decode_chunk", "line_start"]

CHUNK = 256 * 1024  # per poll; a long log is caught up on in reads of this size

# A finished job's log longer than this is shown from about this far before its end: the page
# keeps only its last ~1 MB of text anyway (gpuq.js), and the download has all of it.
TAIL = 1 << 20


def line_start(data: bytes) -> int:
    """Where the first whole line of `data`, read from inside a log, begins: after its first
    newline (within the first 64 KiB), else after the continuation bytes of a character
    cut at its start."""
    newline = data.find(b"\n", 0, 65536)
    if newline >= 0:
        return newline + 1
    cut = 0
    while cut < min(3, len(data)) and 0x80 <= data[cut] < 0xC0:
        cut += 1
    return cut
