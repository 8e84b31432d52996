"""Commits another connection's change in the middle of the cycle's reads, to test what the
cycle makes of a database that moves while it reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def after_the_first_read(
    matches: Callable[[str], bool], change: Callable[[], None]
) -> tuple[Any, list[bool]]:
    """A wrapper for the cycle's connection (`connection.execute_wrapper`) that runs `change`
    from another connection, committed, right after the first SELECT whose SQL `matches`;
    the list says whether it ran."""
    fired: list[bool] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not fired and sql.lstrip().upper().startswith("SELECT") and matches(sql):
            fired.append(True)

            def other() -> None:
                try:
                    change()
                finally:
                    connection.close()  # this thread's own connection

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(timeout=30)
        return result

    return wrapper, fired
