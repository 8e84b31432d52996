"""Bounds on parsed request data, checked before any field sees it. A field that calls str()
on a value (DRF's CharField and IntegerField do, before checking its type) would expand a
YAML alias bomb of a few hundred bytes into gigabytes; nesting deeper than Python's
recursion limit ends in a RecursionError, which is a 500, not a 400; str() of an integer
of over 4,300 digits raises ValueError (YAML reads 0x..., 0b... and 1:2:3 forms of any
length), also a 500; and a lone surrogate (JSON's or YAML's "\\ud800" escape) in a key or a
string cannot be encoded as UTF-8, so the 400 that names it back would itself be a 500."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

# A job spec nests four levels (spec, retries, on, a cause) and holds a few thousand values
# at most (a 1,024-argument command, 256 variables): these bounds leave room to spare.
MAX_DEPTH = 32
MAX_VALUES = 100_000
MAX_INT_BITS = 10_000  # about 3,000 decimal digits: under str()'s limit, far above any field's
SURROGATE = re.compile("[\ud800-\udfff]")


class ShapeProblem(NamedTuple):
    """What is wrong, and the top-level field it is under (None: the document as a whole,
    or a top-level key), so that an API can answer with a field-level message."""

    message: str
    field: str | None


def shape_problem(
    data: Any, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> ShapeProblem | None:
    """What is wrong with the shape of `data` (a parsed JSON or YAML document), or None.
    Iterative, and it stops at the first bound crossed: a bomb costs `max_values` steps."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(data, 1, ())]
    seen = 0
    while stack:
        value, depth, path = stack.pop()
        seen += 1
        if seen > max_values:
            return ShapeProblem(
                f"holds more than {max_values:,} values (a YAML alias counts each time it is used)",
                None,
            )
        if depth > max_depth:
            return ShapeProblem(f"is nested more than {max_depth} levels deep", None)
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            return ShapeProblem("holds a number of over 3,000 digits", None)
        if isinstance(value, str) and SURROGATE.search(value):
            return _surrogate(path, "a value")
        if isinstance(value, dict):
            for k in value:
                if isinstance(k, int) and k.bit_length() > MAX_INT_BITS:
                    return ShapeProblem("holds a key that is a number of over 3,000 digits", None)
                if isinstance(k, str) and SURROGATE.search(k):
                    return _surrogate((*path, k), "a key")
            stack.extend((v, depth + 1, (*path, k)) for k, v in value.items())
        # Tuples and sets too: YAML's !!pairs and !!omap are lists of tuples, !!set a set.
        elif isinstance(value, list | tuple):
            stack.extend((v, depth + 1, (*path, i)) for i, v in enumerate(value))
        elif isinstance(value, set | frozenset):
            stack.extend((v, depth + 1, path) for v in value)
    return None


def _surrogate(path: tuple[Any, ...], what: str) -> ShapeProblem:
    shown = ""
    for part in path:
        if isinstance(part, int):
            shown += f"[{part}]"
        else:
            shown += f".{_printable(part)}" if shown else _printable(part)
    top = path[0] if path else None
    field = top if isinstance(top, str) and not SURROGATE.search(top) else None
    return ShapeProblem(
        f"holds a lone surrogate (a \\ud800-\\udfff escape: not text) in {what}"
        f" at {shown or 'the top level'}",
        field,
    )


def _printable(part: Any) -> str:
    # The key as escapes: the message must itself be valid UTF-8.
    return str(part)[:40].encode("utf-8", "backslashreplace").decode("utf-8")
