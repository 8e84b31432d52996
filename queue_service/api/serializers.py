from __future__ import annotations

from typing import Any

from rest_framework import serializers

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import MAX_LOG_OFFSET
from queue_service.jobs.models import Job, JobEvent, PriorityClass
from queue_service.tenancy.models import ApiToken, Membership, Quota, Team


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    priority = serializers.SlugRelatedField(
        source="priority_class", slug_field="name", read_only=True
    )
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "kind",
            "team",
            "user",
            "priority",
            "state",
            "reason",
            "queue_position",
            "estimated_start",
            "gpus",
            "spec",
            "cluster",
            "placement",
            "gpu_model",
            "borrowed",
            "external_id",
            "remote_state",
            "attempts",
            "exit_code",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class PreviewSerializer(serializers.Serializer):
    starts_now = serializers.BooleanField()
    reason = serializers.DictField(allow_null=True)
    position = serializers.IntegerField(allow_null=True)
    estimated_start = serializers.DateTimeField(allow_null=True)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "from_state", "to_state", "code", "message", "details"]
        read_only_fields = fields


class LogsQuerySerializer(serializers.Serializer):
    # 1 TiB: past any log (and past what a filesystem lets one seek to).
    offset = serializers.IntegerField(min_value=0, max_value=MAX_LOG_OFFSET, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=1_048_576, default=65536)
    stream = serializers.ChoiceField(choices=["stdout", "stderr"], default="stdout")


class LogChunkSerializer(serializers.Serializer):
    offset = serializers.IntegerField(help_text="where this chunk starts, in bytes")
    next_offset = serializers.IntegerField(help_text="the offset to ask for next")
    eof = serializers.BooleanField(help_text="the job ended and nothing follows")
    text = serializers.CharField(help_text="the bytes as UTF-8, invalid sequences replaced")
    data_base64 = serializers.CharField(help_text="the bytes themselves")


# No site has a million GPUs: a larger quota is a typo, and the ceiling keeps the scheduler's
# sums of quotas far from float overflow.
MAX_QUOTA_GPUS = 1_000_000


class GpuAmountField(serializers.FloatField):
    """A number of GPUs (fractions for MIG slices). JSON true/false are not numbers here:
    DRF's FloatField would take them as 1 and 0."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class QuotaSerializer(serializers.ModelSerializer):
    gpu_model = serializers.RegexField(r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$", max_length=64)
    nominal_gpus = GpuAmountField(min_value=0, max_value=MAX_QUOTA_GPUS)
    borrowing_limit_gpus = GpuAmountField(
        min_value=0, max_value=MAX_QUOTA_GPUS, required=False, allow_null=True
    )
    lending_limit_gpus = GpuAmountField(
        min_value=0, max_value=MAX_QUOTA_GPUS, required=False, allow_null=True
    )

    class Meta:
        model = Quota
        fields = [
            "gpu_model",
            "nominal_gpus",
            "borrowing_limit_gpus",
            "lending_limit_gpus",
            "max_running_jobs",
        ]


class QuotaBodySerializer(QuotaSerializer):
    """A quota's values, for PUT .../quotas/{gpu_model}/: the model comes from the path."""

    gpu_model = None  # type: ignore[assignment]

    class Meta(QuotaSerializer.Meta):
        fields = [f for f in QuotaSerializer.Meta.fields if f != "gpu_model"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", max_length=150)

    class Meta:
        model = Membership
        fields = ["username", "role"]


class TeamSerializer(serializers.ModelSerializer):
    quotas = QuotaSerializer(many=True, read_only=True)

    class Meta:
        model = Team
        fields = ["slug", "name", "weight", "max_nominal_gpus", "max_borrowing_gpus", "quotas"]
        read_only_fields = fields


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible", "description"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer):
    layout = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "name",
            "gpu_model",
            "gpus",
            "pool",
            "state",
            "reason",
            "mig_enabled",
            "labels",
            "layout",
            "mig_proposals",
        ]
        read_only_fields = fields

    def get_layout(self, node: Node) -> list[dict[str, Any]]:
        layouts: dict[tuple[int, int], dict[str, Any]] = self.context.get("layouts", {})
        return layouts.get(node.pk, [])  # type: ignore[call-overload,no-any-return]


class ClusterSerializer(serializers.ModelSerializer):
    nodes = NodeSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["name", "kind", "enabled", "last_sync_at", "last_sync_error", "nodes"]
        read_only_fields = fields


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "last_used_at"]
        read_only_fields = ["id", "hint", "created_at", "last_used_at"]


class TokenCreatedSerializer(TokenSerializer):
    key = serializers.CharField(read_only=True, help_text="the token itself, shown only once")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
