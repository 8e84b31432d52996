from __future__ import annotations

import uuid
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, models

from queue_service.clusters.models import Cluster
from queue_service.tenancy.models import Team


class PriorityClass(models.Model):
    name = models.SlugField(max_length=32, unique=True)
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True)
    description = models.CharField(max_length=256, blank=True, default="")

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name


QS = TypeVar("QS", bound=models.QuerySet[Any])


def team_scoped(qs: QS, user: Any) -> QS:
    """Tenant scoping starts here: staff see everything, everyone else their teams' rows."""
    if not user.is_authenticated:
        return qs.none()
    if user.is_staff:
        return qs
    return qs.filter(team__memberships__user=user)


class JobQuerySet(models.QuerySet["Job"]):
    def for_user(self, user: Any) -> JobQuerySet:
        return team_scoped(self, user)


class JobArrayQuerySet(models.QuerySet["JobArray"]):
    def for_user(self, user: Any) -> JobArrayQuerySet:
        return team_scoped(self, user)


class JobArray(models.Model):
    """A job array (Slurm's --array): one submit made one job per index, its tasks."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="job_arrays")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays"
    )
    name = models.CharField(max_length=128)
    indices = models.TextField()  # as given, normalized: "0-15%4"
    size = models.PositiveIntegerField()
    max_running = models.PositiveIntegerField(null=True, blank=True)  # Slurm's %N
    # The array's `notify` as submitted: it decides the array's start and end notices; a
    # task whose own notify was changed since is told of on its own (notify.on_transition).
    notify = models.JSONField(default=list, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)

    objects = JobArrayQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name}[{self.indices}] ({self.id})"


class Job(models.Model):
    class Kind(models.TextChoices):
        TRAINING = "training"
        AGENT = "agent"

    class State(models.TextChoices):
        PENDING = "pending"
        ADMITTED = "admitted"  # the scheduler placed it; dispatch follows
        DISPATCHING = "dispatching"  # a worker is handing it to the backend
        QUEUED = "queued"  # the backend accepted it and has not started it yet
        RUNNING = "running"
        PREEMPTING = "preempting"  # asked to stop for another job; in its grace period
        CANCELLING = "cancelling"  # a user asked to cancel; the backend is stopping it
        SUSPENDING = "suspending"  # a user asked to suspend; the backend is stopping it
        SUSPENDED = "suspended"  # stopped by a user, holding nothing; resume queues it again
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        TIMEOUT = "timeout"
        PREEMPTED = "preempted"  # preempted with no retry left
        LOST = "lost"  # the backend no longer knows it

    TERMINAL = frozenset(
        {State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.PREEMPTED, State.LOST}
    )
    # Holding resources as far as the scheduler is concerned.
    ACTIVE = frozenset(
        {
            State.ADMITTED,
            State.DISPATCHING,
            State.QUEUED,
            State.RUNNING,
            State.PREEMPTING,
            State.CANCELLING,
            State.SUSPENDING,
        }
    )
    # A backend knows about it: sync polls these.
    ON_BACKEND = frozenset(
        {
            State.QUEUED,
            State.RUNNING,
            State.PREEMPTING,
            State.CANCELLING,
            State.SUSPENDING,
            State.DISPATCHING,
        }
    )
    # A user may suspend these (services.suspend_job).
    SUSPENDABLE = frozenset(
        {
            State.PENDING,
            State.ADMITTED,
            State.DISPATCHING,
            State.QUEUED,
            State.RUNNING,
            State.PREEMPTING,
        }
    )
    # Asked to stop; the backend is stopping it (TERM, then KILL after the grace period).
    STOPPING = frozenset({State.PREEMPTING, State.CANCELLING, State.SUSPENDING})
    # A run is under way (a JobRun is open): running, or running while being stopped.
    RUNNING_STATES = frozenset({State.RUNNING, *STOPPING})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRAINING)
    spec = models.JSONField()
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT)
    gpus = models.FloatField(default=0)  # GPU equivalents requested (a MIG slice is a fraction)

    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason = models.JSONField(default=dict, blank=True)  # {code, message, details}
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)

    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    pinned_cluster = models.BooleanField(default=False)  # the user asked for this cluster
    placement = models.JSONField(default=list, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True, default="")
    borrowed = models.BooleanField(default=False)
    external_id = models.CharField(max_length=256, blank=True, default="")
    remote_state = models.CharField(max_length=64, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    # How many times the queue preempted it (its events to preempting), which the cycle reads
    # with every job: kept on the row by transition() rather than counted from its events.
    preemptions = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)

    array = models.ForeignKey(
        JobArray, null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)

    idempotency_key = models.CharField(max_length=128, null=True, blank=True)
    # What the keyed request asked (a hash): a repeat must ask the same to get this job back.
    idempotency_fingerprint = models.CharField(max_length=64, blank=True, default="")
    submitted_at = models.DateTimeField(auto_now_add=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When its stop was first asked (preempted, cancelled or suspended): the victim's grace
    # runs from then, whatever else is written to the job meanwhile (transition() sets it).
    stopping_since = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="idempotent_submit",
            )
        ]
        indexes = [
            models.Index(fields=["state"]),
            models.Index(fields=["team", "state"]),
            models.Index(fields=["cluster", "state"]),
            models.Index(fields=["array", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL

    @property
    def display_name(self) -> str:
        """The name, with a task's index as Slurm shows it: sweep[7]."""
        return self.name if self.array_index is None else f"{self.name}[{self.array_index}]"


class JobEvent(models.Model):
    """One row per transition (and a few notes): the audit trail and the UI's timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, blank=True, default="")
    to_state = models.CharField(max_length=16, blank=True, default="")
    code = models.CharField(max_length=64, blank=True, default="")
    message = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state}->{self.to_state} {self.code}"


class JobRun(models.Model):
    """One row per run of a job (a preempted or requeued job has several): what fair share
    and usage reports count."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs")
    attempt = models.PositiveIntegerField()
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="runs")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs"
    )
    cluster = models.ForeignKey(Cluster, null=True, on_delete=models.SET_NULL, related_name="runs")
    # The attempt's id on its cluster: the job's own is cleared when it goes back to the queue,
    # and this one still reads the attempt's log (to its end, or after the next began).
    external_id = models.CharField(max_length=256, blank=True, default="")
    gpus = models.FloatField()
    gpu_model = models.CharField(max_length=64, blank=True, default="")
    placement = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=16, blank=True, default="")  # the state it left for

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["team", "ended_at"])]

    def __str__(self) -> str:
        return f"{self.job_id} run {self.attempt}"


class SchedulerLock(models.Model):
    """One row; the cycle holds it FOR UPDATE so two cycles never decide at once."""

    # On PostgreSQL the cycle reads in a transaction of its own and applies in another
    # (snapshot.run_cycle): it holds this advisory lock over both, at session level.
    ADVISORY_KEY = 0x67707571  # "gpuq"

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    last_cycle_ms = models.FloatField(null=True, blank=True)
    last_stats = models.JSONField(default=dict, blank=True)

    @classmethod
    def hold(cls) -> SchedulerLock:
        """In a transaction: wait for a cycle under way to end, from its read to its apply,
        and keep the next from starting until this transaction ends."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [cls.ADVISORY_KEY])
        lock, _ = cls.objects.select_for_update().get_or_create(pk=1)
        return lock


class Notification(models.Model):
    """An email a job's `notify` asked for (Slurm's --mail-type), stored in the transaction of
    the transition it tells of and sent after it (notify.deliver): a rolled-back transition
    sends nothing, and a lost send is retried."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"  # claimed by a sender until next_attempt_at (a lease)
        SENT = "sent"
        FAILED = "failed"  # gave up after notify.MAX_ATTEMPTS, or could never be sent

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=16)  # start, end, fail, requeue
    to = models.EmailField()
    subject = models.CharField(max_length=255)
    body = models.TextField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # "array:<id>:start" or "array:<id>:end": an array's notice is stored once, whichever of
    # its tasks gets there first (notify.tell_array).
    dedupe_key = models.CharField(max_length=64, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.job_id} {self.event} -> {self.to} ({self.state})"


class ArrayLook(models.Model):
    """A task's start or end after which its array's notice may be due (notify.tell_array):
    stored in the move's transaction and removed once the look is done. The look runs after
    commit, where a dying process would lose it; the sweep (notify.tell_missed_arrays) does
    what such a row says was not done."""

    array = models.ForeignKey(JobArray, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=16)  # start, end or fail
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.array_id} {self.event} after {self.job_id}"
