"""MIG reasons say what is true of the cluster."""

from __future__ import annotations

from .builders import H100, NOW, decide, job, mig_node, nodes, snap, team, waits


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
