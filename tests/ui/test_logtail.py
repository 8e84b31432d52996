"""Log chunks read at byte offsets never split a character (pure, no browser)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontend.logtail import decode_chunk, line_start


@pytest.mark.parametrize(
    ("data", "final", "text", "consumed"),
    [
        (b"abc", False, "abc", 3),
        ("héllo".encode(), False, "héllo", 6),
        ("hé".encode()[:-1], False, "h", 1),  # é's first byte waits for the next read
        ("a✓".encode()[:-1], False, "a", 1),
        ("a✓".encode()[:-2], False, "a", 1),
        ("a😀".encode()[:-1], False, "a", 1),
        ("hé".encode()[:-1], True, "h\ufffd", 2),  # the end of the log: show what is there
        (b"\x80\x80", False, "\ufffd\ufffd", 2),  # not UTF-8 at all: shown, not held back
        (b"", False, "", 0),
    ],
)
def test_a_chunk_ending_inside_a_character_leaves_it_for_the_next_read(
    data: bytes, final: bool, text: str, consumed: int
) -> None:
    piece = decode_chunk(data, 100, final=final)
    assert (piece.text, piece.next_offset) == (text, 100 + consumed)


@given(text=st.text(max_size=200), size=st.integers(min_value=4, max_value=64))
def test_reading_a_log_in_chunks_of_any_size_gives_back_the_text(text: str, size: int) -> None:
    data = text.encode()
    shown, offset = [], 0
    while True:
        chunk = data[offset : offset + size]
        final = offset + len(chunk) >= len(data)
        piece = decode_chunk(chunk, offset, final=final)
        shown.append(piece.text)
        assert piece.next_offset > offset or not chunk
        offset = piece.next_offset
        if final and offset >= len(data):
            break
    assert "".join(shown) == data.decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("data", "start"),
    [
        (b"ss 0.1\nstep 2\n", 7),  # after the line cut at the read's start
        (b"\nstep 2\n", 1),
        (b"step 2\n", 7),  # the read began at a line's start: that line is dropped too
        ("é, no newline".encode()[1:], 1),  # é's second byte: from the next character
        (b"x" * 70_000 + b"\n", 0),  # no newline near the start (a progress bar): as read
        (b"", 0),
    ],
)
def test_a_log_read_from_inside_starts_at_its_first_whole_line(data: bytes, start: int) -> None:
    assert line_start(data) == start
