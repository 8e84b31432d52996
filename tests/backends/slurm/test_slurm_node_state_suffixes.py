"""A node's state as sinfo's StateLong prints it, suffix included, says whether gpuq may place
new work there (docs/slurm.md, "State"). sinfo(1): `$` the node is in a reservation with the
MAINT flag, `!` a power down is pending, `%` it is being powered down, `~` it is powered off
(power saving: Slurm powers it up for a job it is given), `#` it is being powered up or
configured, `@` a reboot is pending, `*` it does not respond. A node Slurm keeps new jobs off
is `drain`: gpuq must not count its GPUs as free, where Slurm would keep a placed job waiting."""

from __future__ import annotations

import pytest

from queue_service.backends.slurm import parsers

A100 = "A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("idle$", "drain"),
        ("mixed$", "drain"),
        ("allocated$", "drain"),
        ("idle!", "drain"),
        ("mixed!", "drain"),
        ("idle%", "drain"),
        ("idle~", "up"),
        ("idle#", "up"),
        ("mixed@", "up"),
        ("allocated-", "up"),
        ("idle", "up"),
        ("down~", "down"),
        ("drained~", "drain"),
        ("idle*", "down"),
        ("maint", "drain"),
    ],
)
def test_a_nodes_state_suffix_says_whether_it_takes_new_work(state: str, expected: str) -> None:
    line = f"n1|{state}|gpu:a100:4|gpu:a100:0(IDX:N/A)|a100|gpu|none\n"
    node = parsers.parse_sinfo(line, {A100: "a100"})[0]
    assert node.state == expected
