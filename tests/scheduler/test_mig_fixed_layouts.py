"""A node whose MIG layout is the cluster's to change (`Node.mig_fixed`: Slurm's gres.conf,
Kubernetes without named layouts) serves slice jobs by the instances it has. No job waits
for a relayout gpuq cannot make; a layout that would serve the queue is proposed to admins
(`MigRelayout.advisory`), and the instances stay as they are."""

from __future__ import annotations

from dataclasses import replace

from scheduler.types import MigInstance, Node

from .builders import decide, job, mig_node, snap, started, team, waits

ONE_G = tuple(MigInstance("1g.10gb", start, 1) for start in range(7))


def fixed(node: Node) -> Node:
    return replace(node, mig_fixed=True)


def test_a_slice_job_takes_a_free_slice_of_a_fixed_layout_rather_than_await_a_relayout() -> None:
    """Seven free 1g.10gb slices on an idle GPU, a 3g.40gb job ahead of a 1g.10gb one: where
    gpuq may re-lay the GPU out it plans 3g + 1g's for both; where it may not, the 1g job
    takes a slice now and the 3g job waits for a slice of its profile to exist."""
    pending = [job("big", mig="3g.40gb", submit=1.0), job("small", mig="1g.10gb", submit=2.0)]
    movable = decide(snap([mig_node("m1", [ONE_G])], [team("a", 10)], pending))
    held = decide(snap([fixed(mig_node("m1", [ONE_G]))], [team("a", 10)], pending))

    assert [r.advisory for r in movable.relayouts] == [False]
    assert waits(movable)["small"].reason.code == "mig_relayout"

    assert "small" in started(held)
    assert started(held)["small"].placement.allocs[0].mig.profile == "1g.10gb"
    assert held.relayouts == ()  # the GPU is no longer idle: nothing to propose for it
    reason = waits(held)["big"].reason
    assert reason.code == "mig_unavailable", reason


def test_an_idle_fixed_gpu_is_proposed_a_layout_and_keeps_its_own() -> None:
    """A 3g.40gb job, one busy fixed GPU with a held 3g.40gb and one idle fixed GPU of seven
    1g.10gb: the job waits for the held slice (no relayout planned for it), and the idle GPU
    gets an advisory layout with a 3g.40gb for an admin to apply."""
    held_3g = (MigInstance("3g.40gb", 4, 4, "runner"), MigInstance("4g.40gb", 0, 4))
    nodes = [fixed(mig_node("m1", [held_3g])), fixed(mig_node("m2", [ONE_G]))]
    d = decide(snap(nodes, [team("a", 10)], [job("big", mig="3g.40gb")]))

    assert "big" not in started(d)
    assert waits(d)["big"].reason.code != "mig_relayout"
    (proposal,) = d.relayouts
    assert proposal.advisory and (proposal.node, proposal.gpu) == ("m2", 0)
    assert "3g.40gb" in {i.profile for i in proposal.instances}
    assert proposal.message.startswith("GPU 0 on node m2 laid out as ")
    assert "would serve 1 pending" in proposal.message


def test_no_job_is_preempted_to_re_lay_out_a_fixed_gpu() -> None:
    """A GPU whose every slice a lower class holds is emptied, by preemption, only where it
    can be re-laid out for the job; on a fixed layout no slice of the profile can appear."""
    low = tuple(MigInstance("1g.10gb", s, 1, f"low{s}") for s in range(7))
    pending = [job("big", mig="3g.40gb", priority="high")]
    d = decide(snap([fixed(mig_node("m1", [low]))], [team("a", 10)], pending))
    assert d.preemptions == ()
