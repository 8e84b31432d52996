"""A team's usage decays as 2^(-age / half-life): Policy refuses a half-life that is not
positive when it is made, rather than a cycle failing on it later."""

from __future__ import annotations

import math

import pytest

from scheduler.types import Policy


@pytest.mark.parametrize("half_life", [0.0, -1.0, math.nan])
def test_policy_refuses_a_non_positive_fair_share_half_life(half_life: float) -> None:
    with pytest.raises(ValueError, match="fair_share_half_life_s must be positive"):
        Policy(fair_share_half_life_s=half_life)


@pytest.mark.parametrize("after", [0, -1])
def test_policy_refuses_protection_before_any_preemption(after: int) -> None:
    with pytest.raises(ValueError, match="protect_after_preemptions must be at least 1 or None"):
        Policy(protect_after_preemptions=after)
