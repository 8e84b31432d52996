"""MIG reasons say what is true of the cluster."""

from __future__ import annotations

from dataclasses import replace

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    PendingJob,
    Placement,
    RunningJob,
    Snapshot,
)

from .builders import (
    A100,
    H100,
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    request,
    snap,
    started,
    team,
    waits,
)


def test_a_slice_of_a_model_with_no_mig_gpu_is_not_said_to_be_held_by_running_jobs() -> None:
    # The only MIG GPU is an A100; the job asks for a 1g.10gb slice on an H100. Nothing
    # runs. Its reason used to say "(0 free, all held by running jobs)": no running job holds
    # anything, and no H100 MIG GPU exists (a whole-GPU job for an absent model is
    # "unsatisfiable": "only 0 up node(s) of that kind exist").
    d = decide(snap([mig_node("m1")], [team("a", 10)], [job("m", mig="1g.10gb", model=H100)]))
    reason = waits(d)["m"].reason
    assert "held by running jobs" not in reason.message, reason.message
    assert reason.code == "unsatisfiable", reason


def test_a_slice_job_in_a_cluster_without_mig_gpus_is_not_said_to_be_held_by_running_jobs() -> None:
    # Whole-GPU nodes only, nothing running; a 1g.10gb job for any model.
    d = decide(snap(nodes(1, 8), [team("a", 10)], [job("m", mig="1g.10gb")]))
    reason = waits(d)["m"].reason
    assert "held by running jobs" not in reason.message, reason.message


def test_no_free_instance_is_not_said_while_counting_free_instances() -> None:
    # One idle A100 MIG GPU, eight 1g.10gb jobs: it is re-laid out into seven 1g.10gb
    # instances, one per job s0..s6. s7 got "no free 1g.10gb MIG instance (7 free, all
    # taken by jobs ahead)", free_instances 7: the count included the instances of the
    # relayout, which do not exist yet and are all meant for s0..s6. Nothing is free for s7.
    pending = [job(f"s{i}", mig="1g.10gb", submit=NOW - 100 + i) for i in range(8)]
    d = decide(snap([mig_node("m1")], [team("a", 10)], pending))
    reason = waits(d)["s7"].reason
    assert reason.code == "mig_unavailable"
    assert dict(reason.details)["free_instances"] == 0, reason.message


# -- what holds the instances a slice job could use, said as it is ---------------------

SEVEN_1G = tuple(MigInstance("1g.10gb", s, 1) for s in range(7))


def _slice_holder(
    job_id: str, node: str, inst: MigInstance, leaving_since: float | None = None
) -> RunningJob:
    r = JobRequest(job_id, "a", "low", NOW - 700, 1, 1, None, inst.profile, None)
    slot = MigSlot(0, inst.profile, inst.start, inst.size)
    return RunningJob(r, NOW - 600, Placement((NodeAlloc(node, (), slot),)), A100, leaving_since)


def test_an_idle_gpu_re_laid_out_for_a_job_ahead_is_not_said_to_be_held_by_running_jobs() -> None:
    # Nothing runs. The one idle A100 has seven free 1g.10gb instances; a high 7g.80gb job
    # ahead gets it re-laid out. The 1g.10gb job behind was told "(0 free, all held by
    # running jobs), and no idle MIG GPU can be re-laid out".
    pending = [job("big", mig="7g.80gb", priority="high"), job("small", mig="1g.10gb")]
    d = decide(snap([mig_node("m1", [SEVEN_1G])], [team("a", 10)], pending))
    reason = waits(d)["small"].reason
    assert reason.code == "mig_unavailable", reason
    assert "held by running jobs" not in reason.message, reason.message
    assert "GPU 0 on node m1 being re-laid out for other jobs" in reason.message, reason.message
    assert dict(reason.details)["gpus_relaid"] == (("m1", 0),)


def test_free_instances_on_a_gpu_emptied_for_a_preemptor_are_said_to_be_held_for_it() -> None:
    # A low job on the A100's 4g.40gb is leaving, preempted for the high 7g.80gb job "big"
    # (handed back its node); three 1g.10gb instances are free. The 1g.10gb job may not
    # take them: the GPU is big's. It was told "(0 free, all held by running jobs)".
    lay = (MigInstance("4g.40gb", 0, 4, "low"), *(MigInstance("1g.10gb", s, 1) for s in (4, 5, 6)))
    running = [_slice_holder("low", "m1", lay[0], leaving_since=NOW - 10)]
    pending = [
        PendingJob(request("big", mig="7g.80gb", priority="high"), preempting_on=("m1",)),
        job("small", mig="1g.10gb", submit=NOW - 50),
    ]
    d = decide(snap([mig_node("m1", [lay])], [team("a", 10)], pending, running))
    reason = waits(d)["small"].reason
    assert "small" not in started(d)
    assert "held by running jobs" not in reason.message, reason.message
    assert "GPU 0 on node m1 held for job big, which preempted for it" in reason.message, (
        reason.message
    )


def test_a_slice_of_a_profile_no_fixed_layout_has_is_said_not_to_exist() -> None:
    # A fixed layout (Slurm's) of seven 1g.10gb instances, nothing running: a 3g.40gb job
    # can never get one there. It was told "(0 free, all held by running jobs)".
    node = replace(mig_node("m1", [SEVEN_1G]), mig_fixed=True)
    d = decide(snap([node], [team("a", 10)], [job("big", mig="3g.40gb")]))
    reason = waits(d)["big"].reason
    assert reason.code == "mig_unavailable", reason
    assert "(none exists)" in reason.message, reason.message


def _first_preempted_low3(low3_left: bool, first_class: str = "high") -> Snapshot:
    """m1: a 3g.40gb held by a high job, four 1g.10gb held by low jobs of team a; job
    `first` (team a) preempted low3 for its slice, which is leaving or has left; job
    `other` (team b, high, ahead in fair share) wants a 1g.10gb too. Of the same class,
    `first` goes before `other` (a job that preempted leads its class)."""
    lay = [MigInstance("3g.40gb", 4, 4, "keep")]
    lay += [MigInstance("1g.10gb", s, 1, f"low{s}") for s in range(3)]
    lay += [MigInstance("1g.10gb", 3, 1, None if low3_left else "low3")]
    running = [_slice_holder(f"low{s}", "m1", lay[1 + s]) for s in range(3)]
    if not low3_left:
        running.append(_slice_holder("low3", "m1", lay[4], leaving_since=NOW - 10))
    keep = _slice_holder("keep", "m1", lay[0])
    running.append(replace(keep, request=replace(keep.request, priority="high")))
    pending = [
        PendingJob(
            request("first", mig="1g.10gb", priority=first_class, submit=NOW - 50),
            preempting_on=("m1",),
        ),
        job("other", team="b", mig="1g.10gb", priority="high", submit=NOW),
    ]
    return snap([mig_node("m1", [tuple(lay)])], [team("a", 10), team("b", 10)], pending, running)


def test_an_instance_being_freed_for_a_preemptor_is_said_to_be_its() -> None:
    d = decide(_first_preempted_low3(low3_left=False))
    reason = waits(d)["other"].reason
    assert reason.message.startswith(
        "no free 1g.10gb MIG instance (0 free: 3 held by running jobs; 1 held by a job being"
        " preempted for job first)"
    ), reason.message
    assert dict(reason.details)["freed_for"] == (("first", 1),)


def test_a_free_instance_held_for_its_preemptor_is_not_said_to_be_taken_by_jobs_ahead() -> None:
    # `other`, of a higher class, is first in the order: nothing was taken ahead of it. It
    # was told "(0 free, all taken by jobs ahead)".
    d = decide(_first_preempted_low3(low3_left=True, first_class="normal"))
    assert "first" in started(d)
    reason = waits(d)["other"].reason
    assert d.waits[0].job_id == "other"  # first in the order: nothing was taken ahead
    assert "taken by jobs ahead" not in reason.message, reason.message
    assert "1 free but held for job first, which preempted for it" in reason.message, reason.message
