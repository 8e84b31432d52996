"""Read models for clusters: who holds which GPU and MIG slice, shaped for the API and UI.
Another team's job ids are not shown; its team name is (the GPU map is coloured by team)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from queue_service.jobs.models import Job

from .models import Cluster, Node


def gpu_layouts(clusters: list[Cluster], user: Any) -> dict[int, list[dict[str, Any]]]:
    """node pk -> one entry per GPU: {gpu, team, job (if visible), mig: [{profile, start, size,
    team, job}]}."""
    visible = set(
        Job.objects.for_user(user).filter(state__in=Job.ACTIVE).values_list("pk", flat=True)
    )
    holders: dict[tuple[int, str], dict[tuple[int, int | None], dict[str, Any]]] = defaultdict(dict)
    active = Job.objects.filter(state__in=Job.ACTIVE, cluster__in=clusters).select_related("team")
    for job in active.only("id", "placement", "cluster_id", "team__slug"):
        who = {"team": job.team.slug, "job": str(job.pk) if job.pk in visible else None}
        for a in job.placement:
            slot = holders[(job.cluster_id, a["node"])]  # type: ignore[index]
            if a.get("mig"):
                slot[(a["mig"]["gpu"], a["mig"]["start"])] = who
            for g in a.get("gpus", []):
                slot[(g, None)] = who
    out: dict[int, list[dict[str, Any]]] = {}
    for node in Node.objects.filter(cluster__in=clusters):
        slot = holders.get((node.cluster_id, node.name), {})
        gpus = []
        for i in range(node.gpus):
            entry: dict[str, Any] = {"gpu": i, **slot.get((i, None), {"team": None, "job": None})}
            if node.mig_enabled:
                entry["mig"] = [
                    {
                        "profile": m["profile"],
                        "start": m["start"],
                        "size": m["size"],
                        **slot.get((i, m["start"]), {"team": None, "job": None}),
                    }
                    for m in sorted(node.mig, key=lambda m: m["start"])
                    if m["gpu"] == i
                ]
            gpus.append(entry)
        out[node.pk] = gpus
    return out
