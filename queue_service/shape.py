"""Bounds on parsed request data, checked before any field sees it. A field that calls str()
on a value (DRF's CharField and IntegerField do, before checking its type) would expand a
YAML alias bomb of a few hundred bytes into gigabytes; nesting deeper than Python's
recursion limit ends in a RecursionError, which is a 500, not a 400; and str() of an integer
of over 4,300 digits raises ValueError (YAML reads 0x..., 0b... and 1:2:3 forms of any
length), also a 500."""

from __future__ import annotations

from typing import Any

# A job spec nests four levels (spec, retries, on, a cause) and holds a few thousand values
# at most (a 1,024-argument command, 256 variables): these bounds leave room to spare.
MAX_DEPTH = 32
MAX_VALUES = 100_000
MAX_INT_BITS = 10_000  # about 3,000 decimal digits: under str()'s limit, far above any field's


def shape_problem(
    data: Any, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> str | None:
    """What is wrong with the shape of `data` (a parsed JSON or YAML document), or None.
    Iterative, and it stops at the first bound crossed: a bomb costs `max_values` steps."""
    stack = [(data, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > max_values:
            return (
                f"holds more than {max_values:,} values (a YAML alias counts each time it is used)"
            )
        if depth > max_depth:
            return f"is nested more than {max_depth} levels deep"
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            return "holds a number of over 3,000 digits"
        if isinstance(value, dict):
            if any(isinstance(k, int) and k.bit_length() > MAX_INT_BITS for k in value):
                return "holds a key that is a number of over 3,000 digits"
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None
