"""MIG jobs in the scheduler: free instances, relayout requests, quota by GPU fraction."""

from __future__ import annotations

from scheduler.types import MigInstance, NodeAlloc

from .builders import (
    A100,
    H100,
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    running,
    snap,
    started,
    team,
    waits,
)


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


def test_a_job_of_no_gpus_runs_on_a_mig_node_taking_no_slice() -> None:
    """A job of no GPUs uses neither a GPU nor a slice: a MIG node can take it (before, it
    waited for ever, "only 0 nodes of that kind are up"), and the node's free instance is
    still there for a slice job of the same cycle."""
    node = mig_node("m1", [[inst("7g.80gb", 0, 8)]])
    d = decide(snap([node], [team("a", 1)], [job("cpu", gpus=0), job("agent", mig="7g.80gb")]))
    assert started(d)["cpu"].placement.allocs == (NodeAlloc("m1", (), None),)
    assert started(d)["agent"].placement.allocs[0].mig is not None


def test_a_job_of_no_gpus_pinned_to_a_model_only_mig_nodes_have_runs_there() -> None:
    cluster = [*nodes(1, model=H100, prefix="h"), mig_node("m1", model=A100)]
    d = decide(snap(cluster, [team("a", 1)], [job("cpu", gpus=0, model=A100)]))
    assert started(d)["cpu"].placement.node_names == ("m1",)


def test_a_gpu_job_for_any_model_is_refused_for_quota_not_sent_to_a_mig_only_model() -> None:
    """Only jobs of no GPUs see MIG nodes as whole-GPU capacity: a 1-GPU job for any model,
    whose team's quota covers only the model of the MIG nodes, is told about its quota for
    the model it could run on, not that no node can hold it."""
    cluster = [*nodes(1, model=H100, prefix="h"), mig_node("m1", model=A100)]
    d = decide(snap(cluster, [team("a", 1, model=A100)], [job("x")]))
    assert waits(d)["x"].reason.code == "no_quota", waits(d)["x"].reason


def test_mig_model_constraint_is_respected() -> None:
    node = mig_node("m1", [[inst("3g.40gb", 4, 4)]], model=A100)
    d = decide(snap([node], [team("a", 1)], [job("x", mig="3g.40gb", model="H100-SXM5-80GB")]))
    assert not d.starts


def test_a_site_supplied_mig_table_makes_an_unknown_model_usable() -> None:
    from scheduler.mig import overrides_from, validate_layout
    from scheduler.types import MigModelTable, Policy, Snapshot

    from .builders import decide, job, mig_node

    no_quota = Policy(quotas=False)

    table = MigModelTable(
        "X-GPU-48GB",
        4,
        4,
        (("1g.12gb", 1, 1, 4, (0, 1, 2, 3), 1), ("2g.24gb", 2, 2, 2, (0, 2), 2)),
    )
    base = Snapshot((mig_node("x1", model="X-GPU-48GB"),), (), (job("agent", mig="2g.24gb"),))
    without = decide(base, no_quota)
    assert not without.relayouts
    with_table = decide(Snapshot(base.nodes, (), base.pending, mig_tables=(table,)), no_quota)
    (relayout,) = with_table.relayouts
    assert {i.profile for i in relayout.instances} == {"2g.24gb"}
    assert all(i.start in (0, 2) for i in relayout.instances)
    assert validate_layout("X-GPU-48GB", relayout.instances, overrides_from([table])) == []


def test_a_shorter_slice_job_of_a_refused_kind_still_borrows_until_the_owner_needs_it() -> None:
    # a (nominal 9: the whole cluster) runs 4 GPUs until NOW + 1000 and waits with an 8-GPU
    # job: its 5 idle GPUs are lent until then. b has no nominal: its slice jobs borrow, and
    # the long one may not.
    layout = [inst("1g.10gb", s, 1) for s in range(7)]
    a_run = running("a-run", {"n1": [0, 1, 2, 3]}, team="a", started=NOW - 600, limit=1600.0)
    pending = [
        job("a-big", team="a", gpus=8, submit=NOW - 900),
        job("b-long", team="b", mig="1g.10gb", limit=3600.0, submit=NOW - 50),
        job("b-short", team="b", mig="1g.10gb", limit=300.0, submit=NOW - 40),
    ]
    teams = [team("a", 9), team("b", 0, borrow=1)]
    d = decide(snap([*nodes(1), mig_node("m1", [layout])], teams, pending, [a_run]))
    assert [(x.job_id, x.borrowed) for x in d.starts] == [("b-short", True)]
    assert waits(d)["b-long"].reason.code == "quota_exhausted"
