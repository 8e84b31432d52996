"""MIG jobs in the scheduler: free instances, relayout requests, quota by GPU fraction."""

from __future__ import annotations

from scheduler.types import MigInstance

from .builders import A100, decide, job, mig_node, snap, started, team, waits


def inst(profile: str, start: int, size: int, job_id: str | None = None) -> MigInstance:
    return MigInstance(profile, start, size, job_id)


def test_mig_job_takes_a_free_instance_of_its_profile() -> None:
    node = mig_node("m1", [[inst("3g.40gb", 4, 4), inst("1g.10gb", 0, 1, "other")]])
    d = decide(snap([node], [team("a", 1)], [job("agent", mig="3g.40gb")]))
    alloc = started(d)["agent"].placement.allocs[0]
    assert (
        alloc.node == "m1"
        and alloc.mig is not None
        and (alloc.mig.profile, alloc.mig.start) == ("3g.40gb", 4)
    )


def test_mig_job_without_a_free_instance_asks_for_a_relayout_and_waits() -> None:
    d = decide(snap([mig_node("m1")], [team("a", 1)], [job("agent", mig="1g.10gb")]))
    assert not d.starts
    assert len(d.relayouts) == 1 and d.relayouts[0].node == "m1"
    assert any(i.profile == "1g.10gb" for i in d.relayouts[0].instances)
    assert waits(d)["agent"].reason.code == "mig_relayout"


def test_mig_slice_counts_as_its_gpu_fraction_against_quota() -> None:
    layout = [inst("1g.10gb", s, 1) for s in range(7)]
    # 3/7 of a GPU of quota holds three 1g slices, not four.
    d = decide(
        snap(
            [mig_node("m1", [layout])],
            [team("a", 3 / 7)],
            [job(f"s{i}", mig="1g.10gb", submit=i) for i in range(4)],
        )
    )
    assert len(d.starts) == 3
    assert waits(d)["s3"].reason.code == "quota_exhausted"


def test_unknown_mig_profile_is_an_invalid_request() -> None:
    d = decide(snap([mig_node("m1")], [team("a", 1)], [job("x", mig="nonsense")]))
    assert waits(d)["x"].reason.code == "invalid_request"


def test_whole_gpu_jobs_do_not_use_mig_nodes() -> None:
    d = decide(snap([mig_node("m1", gpus=8)], [team("a", 8)], [job("x")]))
    assert not d.starts


def test_mig_model_constraint_is_respected() -> None:
    node = mig_node("m1", [[inst("3g.40gb", 4, 4)]], model=A100)
    d = decide(snap([node], [team("a", 1)], [job("x", mig="3g.40gb", model="H100-SXM5-80GB")]))
    assert not d.starts
