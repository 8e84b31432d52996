"""K schedule() calls on the bench's snapshot, for counting instructions where wall time
drifts (docs/BENCHMARKS.md, twenty-seventh session): run it under Valgrind for K = 1 and 3;
half the difference is one call, without the imports and the snapshot's construction.

    valgrind --tool=cachegrind --cache-sim=no python3 bench/scheduler_calls.py 10000 1
    valgrind --tool=cachegrind --cache-sim=no python3 bench/scheduler_calls.py 10000 3

TREE (optional third argument): a checkout whose scheduler/ to import instead, for a side-by-
side count of two versions on the same snapshot.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else str(HERE.parent))
sys.path.insert(1, str(HERE))

# scheduler first: scheduler_bench puts this checkout first on the path when imported.
from scheduler import schedule  # noqa: E402, I001
from scheduler.types import Policy  # noqa: E402
from scheduler_bench import snapshot  # noqa: E402


def main() -> None:
    size, calls = int(sys.argv[1]), int(sys.argv[2])
    s = snapshot(size)
    gc.collect()
    gc.disable()  # as the service's cycle makes the call
    for _ in range(calls):
        schedule(s, Policy(), 0.0)


if __name__ == "__main__":
    main()
