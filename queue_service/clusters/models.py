from __future__ import annotations

from django.db import models


class Cluster(models.Model):
    class Kind(models.TextChoices):
        LOCAL = "local"
        SLURM = "slurm"
        KUBERNETES = "kubernetes"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Kind-specific configuration (SSH host, kubeconfig, GRES map...). Secrets in here are
    # never returned by the API.
    settings = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class State(models.TextChoices):
        UP = "up"
        DRAIN = "drain"
        DOWN = "down"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=128)
    gpu_model = models.CharField(max_length=64)
    gpus = models.PositiveIntegerField()
    pool = models.CharField(max_length=64, blank=True, default="")
    # MIG: [{"gpu": i, "profile": "1g.10gb", "start": s, "size": n}, ...] as inventory reports.
    mig_enabled = models.BooleanField(default=False)
    mig = models.JSONField(default=list, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    # gpuq's own MIG layout proposals per GPU ({gpu: {"layout": [...], "message": ...}}) for
    # clusters where gpuq cannot apply them (Slurm, or no matching named layout); inventory
    # syncs never overwrite it.
    mig_proposals = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.UP)
    reason = models.CharField(max_length=256, blank=True, default="")
    # CPUs and memory (MiB) the node offers jobs, as inventory reports them; null: unknown
    # (no constraint). A job asking more of them per GPU than the node's share is charged
    # for the GPUs it makes unusable (jobs/snapshot.py, Footprints).
    cpus = models.PositiveIntegerField(null=True, blank=True)
    memory_mb = models.PositiveBigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_per_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"
