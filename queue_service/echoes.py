"""What an error message repeats of what the client sent (a choice that is none, a team nobody
has, a field that does not exist) is shown up to SHOWN_CHARS characters, then "…": a megabyte
sent is not a megabyte answered. The API's answers (api/errors.py) and the UI's pages
(frontend/views/jobs.py) cut them alike. A message still longer after that (one repeating a
list of many short values) is cut as a whole; none of ours is a tenth as long."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

SHOWN_CHARS = 64
MAX_MESSAGE_CHARS = 1024
CUT = "…"


class Echoes:
    """The client's texts of over SHOWN_CHARS, as sent, trimmed (as CharField reads them) and
    as repr() writes them (as messages quote them), found in error messages by their first
    SHOWN_CHARS characters. `sent` is read only once a message is long enough to need it."""

    def __init__(self, sent: Iterable[str]) -> None:
        self._sent = sent
        self._index: dict[str, list[str]] | None = None

    def cut(self, data: Any) -> Any:
        """`data` (a DRF error detail: dicts, lists and messages) with what it repeats cut."""
        if isinstance(data, dict):
            return {self._key(k): self.cut(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.cut(v) for v in data]
        if isinstance(data, str) and len(data) > SHOWN_CHARS:
            text = self._message(data)
            return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + CUT
        return data

    @staticmethod
    def _key(key: Any) -> Any:
        # Fields' names are short: a longer key is one the client sent (an unknown field).
        return key[:SHOWN_CHARS] + CUT if isinstance(key, str) and len(key) > SHOWN_CHARS else key

    def _message(self, message: str) -> str:
        index = self._texts()
        parts: list[str] = []
        copied = at = shown = 0
        # Up to what MAX_MESSAGE_CHARS keeps of it: the rest is cut as it is.
        while at + SHOWN_CHARS < len(message) and shown + at - copied <= MAX_MESSAGE_CHARS:
            found = index.get(message[at : at + SHOWN_CHARS])
            length = max((_shared(message, at, text) for text in found), default=0) if found else 0
            if length > SHOWN_CHARS:
                parts += [message[copied : at + SHOWN_CHARS], CUT]
                shown += at + SHOWN_CHARS - copied + len(CUT)
                copied = at = at + length
            else:
                at += 1
        return "".join([*parts, message[copied:]])

    def _texts(self) -> dict[str, list[str]]:
        if self._index is None:
            self._index = {}
            for text in self._sent:
                if len(text) <= SHOWN_CHARS:
                    continue
                for form in {text, text.strip(), repr(text)[1:-1]}:
                    same_start = self._index.setdefault(form[:SHOWN_CHARS], [])
                    # A few per start, the longest: a client's many near-copies of one text
                    # must not make every place it starts a search through them all.
                    if len(form) > SHOWN_CHARS and form not in same_start:
                        same_start.append(form)
                        same_start.sort(key=len, reverse=True)
                        del same_start[4:]
        return self._index


def strings(data: Any) -> Iterator[str]:
    """Every text in a parsed body, keys included (shape.py has bounded how many)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend(value)


def _shared(message: str, at: int, text: str) -> int:
    """How many characters of `text` `message` holds from `at` (a binary search: texts are
    up to megabytes long)."""
    low, high = 0, min(len(text), len(message) - at)
    while low < high:
        middle = (low + high + 1) // 2
        if message.startswith(text[:middle], at):
            low = middle
        else:
            high = middle - 1
    return low
