from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import can_read_sync_errors, sync_error_summary
from queue_service.jobs.dispatch import MAX_LOG_OFFSET
from queue_service.jobs.models import Job, JobEvent, PriorityClass
from queue_service.jobs.reports import (
    DEFAULT_DAYS,
    EARLIEST,
    MAX_DAYS,
    MigOffers,
    gpus_of_quota,
    waiting_slice,
)
from queue_service.jobs.spec import (
    MAX_ARRAY_INDEX,
    MAX_ARRAY_TEXT,
    DurationField,
    NotifyField,
    TextField,
    TextPatternField,
)
from queue_service.tenancy.models import ApiToken, Membership, Quota, Team


class ArrayTaskSerializer(serializers.Serializer):
    """Which task of a job array a job is (null: not in an array)."""

    id = serializers.UUIDField(help_text="the array's id: ?array= lists its tasks")
    index = serializers.IntegerField(help_text="this task's index (its GPUQ_ARRAY_TASK_ID)")
    indices = serializers.CharField(help_text="the array's indices as submitted: 0-15%4")
    size = serializers.IntegerField(help_text="tasks in the array")
    max_running = serializers.IntegerField(
        allow_null=True, help_text="at most this many tasks at once (null: no limit)"
    )


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    priority = serializers.SlugRelatedField(
        source="priority_class", slug_field="name", read_only=True
    )
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    array = serializers.SerializerMethodField()
    gpus = serializers.SerializerMethodField()
    preemptions = serializers.IntegerField(
        read_only=True,
        help_text="how many times the queue preempted it (a reclaim or a higher priority; not"
        " its cluster's own preemptions); once GPUQ_PROTECT_AFTER_PREEMPTIONS, it starts"
        " again only within its team's nominal quota and is not preempted again",
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "array",
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
            "preemptions",
            "exit_code",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(ArrayTaskSerializer(allow_null=True))
    def get_array(self, job: Job) -> dict[str, Any] | None:
        if job.array_id is None:
            return None
        return ArrayTaskSerializer(
            {
                "id": job.array_id,
                "index": job.array_index,
                "indices": job.array.indices,
                "size": job.array.size,
                "max_running": job.array.max_running,
            }
        ).data

    @extend_schema_field(
        serializers.FloatField(
            help_text="GPUs it counts as against quota (a MIG slice a share of one); for a"
            " waiting slice job, the largest share among the GPU models that could run it"
        )
    )
    def get_gpus(self, job: Job) -> float:
        if not waiting_slice(job):
            return job.gpus
        # The nodes and tables are read once for a whole list, and only if a job needs them.
        if self._offers is None:
            self._offers = MigOffers.read()
        return gpus_of_quota(job, self._offers)

    _offers: MigOffers | None = None


def refuse_unknown(data: Any, fields: Any, why: str) -> None:
    # key=str: a YAML body may mix number and text keys.
    unknown = sorted(set(data) - set(fields), key=str) if isinstance(data, dict) else []
    if unknown:
        raise serializers.ValidationError({str(name): [why] for name in unknown})


def with_path(data: Any, field: str, value: str) -> dict[str, Any]:
    """A body for a URL that names `field`: the path's value, which the body may repeat but
    not contradict (a PUT to one quota's path naming another must change neither)."""
    # A list or null is refused as such: read as {}, it was answered "role: must be one of".
    if not isinstance(data, dict):
        raise serializers.ValidationError({"non_field_errors": ["the body must be a JSON object"]})
    body = {**data}
    given = body.setdefault(field, value)
    # What is not text is the field's to refuse: "expected a string", not "the path names".
    if isinstance(given, str) and given != value:
        raise serializers.ValidationError(
            {field: [f"the path names {value!r}: give the same or leave it out"]}
        )
    return body


def refuse_unwritable(serializer: serializers.Serializer, what: str) -> None:
    """refuse_unknown for a body that writes `what`: any field not among its writable ones
    (a typo must not silently store something else than asked for)."""
    writable = [name for name, field in serializer.fields.items() if not field.read_only]
    why = f"not a field of {what}: give {', '.join(writable)}"
    refuse_unknown(serializer.initial_data, writable, why)


class ResubmitSerializer(serializers.Serializer):
    """What a copy may change: its array's indices (checked as a job file's `array`)."""

    array = serializers.CharField(
        required=False,
        max_length=MAX_ARRAY_TEXT,
        help_text="submit the copy as an array of these indices, e.g. an array's failed tasks",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        why = "a copy keeps the original's spec; only array may be given"
        refuse_unknown(self.initial_data, self.fields, why)
        return attrs


UPDATE_ONLY = (
    "only priority, time_limit, notify and array.max_running can change; resubmit a copy to"
    " change the rest"
)


class ArrayLimitSerializer(serializers.Serializer):
    max_running = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ARRAY_INDEX,
        allow_null=True,
        help_text="at most this many of the array's tasks at once (%N); null: no limit",
    )

    def to_internal_value(self, data: Any) -> Any:
        refuse_unknown(data, self.fields, UPDATE_ONLY)
        return super().to_internal_value(data)


class JobUpdateSerializer(serializers.Serializer):
    """What may change after submit (as `scontrol update`): a waiting job's priority class
    and time limit, what a job emails about until it ends, and its array's limit of tasks at
    once."""

    priority = TextField(required=False, max_length=32)
    time_limit = DurationField(required=False, allow_null=True)
    notify = NotifyField(required=False)
    array = ArrayLimitSerializer(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unknown(self.initial_data, self.fields, UPDATE_ONLY)
        if not attrs:
            raise serializers.ValidationError(
                {
                    "non_field_errors": [
                        "nothing to change: give priority, time_limit, notify or array"
                    ]
                }
            )
        return attrs


class PreviewSerializer(serializers.Serializer):
    starts_now = serializers.BooleanField()
    # It waits only for what a submit's cycle does for it (a relayout, a preemption): the
    # reason says what that is.
    starts_soon = serializers.BooleanField()
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
    attempt = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        help_text="which of the job's attempts' log (default: its latest); an attempt's log"
        " stays readable after the job went back to the queue and the next attempt began,"
        " as long as its cluster keeps it (at most the job's attempts so far)",
    )


class LogChunkSerializer(serializers.Serializer):
    offset = serializers.IntegerField(help_text="where this chunk starts, in bytes")
    next_offset = serializers.IntegerField(
        help_text="the offset to ask for next: after the last whole UTF-8 character (a"
        " character the chunk's end cut comes whole in the next chunk)"
    )
    eof = serializers.BooleanField(
        help_text="the job has ended and its log is read out: nothing follows. An attempt"
        " a suspend or a requeue ended is not the job's end (see attempt_eof)"
    )
    attempt_eof = serializers.BooleanField(
        help_text="this attempt's log is read out: nothing more will be written to it. The"
        " job's next attempt (a requeue, a resume), once it has one, has a log of its own"
        " from offset 0: `attempt=` + 1"
    )
    gone = serializers.BooleanField(
        help_text="the cluster no longer keeps this attempt's log (a stopped attempt's pod"
        " is deleted with it on Kubernetes): nothing of it can be read"
    )
    text = serializers.CharField(
        help_text="the chunk as UTF-8, invalid sequences replaced: chunks end at whole"
        " characters, so their texts joined are the log's"
    )
    data_base64 = serializers.CharField(help_text="the bytes themselves (those of text)")
    attempt = serializers.IntegerField(
        min_value=0,
        help_text="the job's attempt whose log this is (0: none yet); each attempt's log"
        " starts at offset 0, so an offset counts only in the attempt it was read from",
    )
    log_id = serializers.CharField(
        allow_blank=True,
        help_text="which log of the attempt this is, when the cluster restarted it in place"
        " (a container restarted in its pod): a new log_id starts over at offset 0, as a new"
        " attempt does; empty when the attempt has one log",
    )


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
    # Untrimmed: a quota is named by its model exactly, and a path naming "H100 " must not
    # change the quota of "H100" (the UI's form trims what is typed, as its boxes all do).
    gpu_model = TextPatternField(
        r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})\Z",
        max_length=64,
        trim_whitespace=False,
        error_messages={
            "invalid": "must look like A100-SXM4-80GB (letters, digits, ._-), or * for any model"
        },
    )
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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unwritable(self, "a quota")
        return attrs


class QuotaBodySerializer(QuotaSerializer):
    """A quota's values, for PUT .../quotas/{gpu_model}/: the model comes from the path."""

    gpu_model = None  # type: ignore[assignment]

    class Meta(QuotaSerializer.Meta):
        fields = [f for f in QuotaSerializer.Meta.fields if f != "gpu_model"]


class MembershipSerializer(serializers.ModelSerializer):
    username = TextField(source="user.username", max_length=150)

    class Meta:
        model = Membership
        fields = ["username", "role"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unwritable(self, "a membership")
        return attrs


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
    last_sync_error = serializers.SerializerMethodField()
    last_sync_error_detail = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = [
            "name",
            "kind",
            "enabled",
            "last_sync_at",
            "last_sync_error",
            "last_sync_error_detail",
            "nodes",
        ]
        read_only_fields = fields

    @extend_schema_field(
        serializers.CharField(
            help_text="why the last sync failed, in a few words safe to show anyone, and since"
            " when (the last sync that worked); empty when it worked"
        )
    )
    def get_last_sync_error(self, cluster: Cluster) -> str:
        return sync_error_summary(cluster)

    @extend_schema_field(
        serializers.CharField(
            allow_null=True,
            help_text="the failed sync's own words (hosts, accounts, paths): site staff only;"
            " null for everyone else",
        )
    )
    def get_last_sync_error_detail(self, cluster: Cluster) -> str | None:
        request = self.context.get("request")
        if request is None or not can_read_sync_errors(request.user):
            return None
        return cluster.last_sync_error


# C0 (tab and newline too: a token's name is one line of a listing), DEL and C1, and, as in
# a job's name (spec.NAME_SPOOF), bidirectional controls and line separators.
TOKEN_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069]")


class TokenSerializer(serializers.ModelSerializer):
    name = TextField(max_length=64)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "last_used_at"]
        read_only_fields = ["id", "hint", "created_at", "last_used_at"]

    def validate_name(self, value: str) -> str:
        # As a job's name (spec.py): an escape sequence would reach the terminal that lists it.
        if TOKEN_NAME_CONTROL.search(value):
            raise serializers.ValidationError("must be non-empty text without control characters")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unwritable(self, "a new token (it lasts until revoked)")
        return attrs


class TokenCreatedSerializer(TokenSerializer):
    key = serializers.CharField(read_only=True, help_text="the token itself, shown only once")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]


class UsageQuerySerializer(serializers.Serializer):
    """A usage report's period: ?from=&to=, ISO days (UTC), the last 14 days by default."""

    def get_fields(self) -> dict[str, serializers.Field]:
        # "from" is a keyword: the fields are named here rather than as class attributes.
        return {
            "from": serializers.DateField(
                required=False, help_text=f"the first day; default: {DEFAULT_DAYS} days to `to`"
            ),
            "to": serializers.DateField(required=False, help_text="the last day; default: today"),
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        today = timezone.now().date()
        errors: dict[str, list[str]] = {}
        for name in ("from", "to"):
            if name in attrs and not EARLIEST <= attrs[name] <= today:
                errors[name] = [f"days run from {EARLIEST.isoformat()} to today ({today})"]
        if errors:
            raise serializers.ValidationError(errors)
        last = attrs.get("to", today)
        # Only once `to` is in range: a fortnight before year 1 is no date (a 500).
        first = (
            attrs["from"]
            if "from" in attrs
            else max(EARLIEST, last - timedelta(days=DEFAULT_DAYS - 1))
        )
        if first > last:
            raise serializers.ValidationError({"from": [f"{first} is after to ({last})"]})
        if (last - first).days >= MAX_DAYS:
            raise serializers.ValidationError({"from": [f"at most {MAX_DAYS} days at once"]})
        return {"first": first, "last": last}


class UserHoursSerializer(serializers.Serializer):
    user = serializers.CharField()
    gpu_hours = serializers.FloatField()


class DayHoursSerializer(serializers.Serializer):
    day = serializers.DateField()
    user = serializers.CharField()
    gpu_hours = serializers.FloatField()


class QuotaUsageSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(
        help_text="a quota's model; or a model no quota (nor a * quota) covers where the"
        " team's jobs hold GPUs (its quota deleted meanwhile): nominal 0, borrowing limit 0,"
        " all of it borrowed"
    )
    used_gpus = serializers.FloatField(help_text="held by the team's admitted and running jobs")
    nominal_gpus = serializers.FloatField()
    borrowing_limit_gpus = serializers.FloatField(allow_null=True)
    borrowed_gpus = serializers.FloatField(
        help_text="used beyond nominal (within the scheduler's 1e-9 of it is none)"
    )


class TeamUsageSerializer(serializers.Serializer):
    """What a team admin reads: GPU-hours per user and per UTC day (from every run, so a
    preempted run counts; a run still going counts up to now), and the quotas in use now."""

    team = serializers.CharField()
    total_gpu_hours = serializers.FloatField()
    users = UserHoursSerializer(many=True, help_text="users with usage, alphabetical")
    days = DayHoursSerializer(many=True, help_text="days and users with usage, oldest first")
    quotas = QuotaUsageSerializer(many=True)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        return {
            "team": fields.pop("team"),
            "from": serializers.DateField(),
            "to": serializers.DateField(),
            **fields,
        }


class MembershipOfMeSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="the team's slug")
    role = serializers.CharField(help_text="member or admin")


class MeSerializer(serializers.Serializer):
    """The caller's account: who the API takes you for, and where `notify` writes to."""

    username = serializers.CharField(read_only=True)
    email = TextField(
        allow_blank=True,
        max_length=254,
        help_text="where a job's notify writes to; empty: nowhere (notify is then refused). "
        "A new address is not set at once: see `pending_email`",
    )
    is_staff = serializers.BooleanField(read_only=True)
    teams = MembershipOfMeSerializer(many=True, read_only=True)
    pending_email = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="the new address a confirmation link was mailed to, waiting: `email` becomes "
        "it once you follow the link (once, within 3 days); otherwise null. Asking for another "
        "replaces it (its link then no longer works); clearing `email`, or setting the one it "
        "has, takes effect at once, drops it and mails nothing",
    )
    pending_email_expires = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="when the link to `pending_email` stops working; null without one",
    )
    detail = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="with `pending_email`, the same in words; otherwise null",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unknown(self.initial_data, ["email"], "only email can change here")
        return attrs
