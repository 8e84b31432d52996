"""gpuq's scheduling policy as a pure, standard-library package.

`schedule(snapshot, policy, now) -> Decisions` is the whole interface the service uses; the
simulator (`python -m scheduler simulate`) calls the very same function.
"""

from __future__ import annotations

from .engine import schedule
from .types import Decisions, Policy, Snapshot

__all__ = ["Decisions", "Policy", "Snapshot", "schedule"]
