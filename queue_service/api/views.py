"""Thin views: parse, call a service or a tenant-scoped queryset, serialize."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from django.db.models import F, Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queue_service.clusters.models import Cluster
from queue_service.clusters.services import gpu_layouts
from queue_service.jobs import services as job_services
from queue_service.jobs.dispatch import read_logs
from queue_service.jobs.logtext import decode_chunk
from queue_service.jobs.models import Job, PriorityClass
from queue_service.jobs.reports import team_usage
from queue_service.jobs.spec import JobSpecSerializer
from queue_service.tenancy import services as team_services
from queue_service.tenancy.models import ApiToken, Membership, PendingEmail, Quota, Team

from . import serializers as s
from .parsers import JSONParser, YAMLParser
from .schema import errors

JOB_FILTERS = {
    "state": "state__in",
    "kind": "kind__in",
    "team": "team__slug__in",
    "cluster": "cluster__name__in",
    "priority": "priority_class__name__in",
}
# Filters over a fixed set of values: a misspelt one is a 400, not an empty list.
FILTER_CHOICES = {"state": Job.State.values, "kind": Job.Kind.values}


def _check_choices(param: str, values: list[str]) -> None:
    known = FILTER_CHOICES.get(param)
    if known is None:  # names (teams, clusters, ...): one nobody has matches nothing
        return
    unknown = [v for v in values if v not in known]
    if unknown:
        raise ValidationError(
            {
                param: [
                    f"unknown {param} {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
                ]
            }
        )


IDEMPOTENCY_KEY = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 128  # Job.idempotency_key's column
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_KEY,
    str,
    OpenApiParameter.HEADER,
    description=f"1 to {MAX_IDEMPOTENCY_KEY} printable characters: a repeat of a request with"
    " the same key answers with the job the first one made",
)


def _listed(params: Any, param: str) -> list[str]:
    """A filter's values, comma-separated and/or the parameter repeated (`?state=a&state=b`,
    as many clients send a list): all of them, not the last one only."""
    return [v for raw in params.getlist(param) for v in raw.split(",") if v]


def _idempotency_key(request: Request) -> str | None:
    """The header's key, or None without one. An empty key is refused, not stored as a key:
    every later submit with an empty key would get the first job back, and be lost."""
    raw = request.headers.get(IDEMPOTENCY_KEY)
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise ValidationError(
            {IDEMPOTENCY_KEY: [f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters"]}
        )
    return key


FILTER_PARAMETERS = {
    name: OpenApiParameter(name, str, description=f"only these {what}, comma-separated")
    for name, what in [
        ("state", f"states ({', '.join(Job.State.values)})"),
        ("kind", f"kinds ({', '.join(Job.Kind.values)})"),
        ("team", "teams (slugs)"),
        ("cluster", "clusters"),
        ("priority", "priority classes"),
    ]
}


USER_PARAMETER = OpenApiParameter(
    "user", str, description="only these users' jobs, comma-separated (me: yours)"
)


def _of_users(qs: QuerySet[Job], request: Request) -> QuerySet[Job]:
    """The `user` filter (squeue -u): only jobs these users submitted, `me` being the caller;
    within qs, so within what the caller may see."""
    if users := _listed(request.query_params, "user"):
        me = request.user.get_username()
        qs = qs.filter(user__username__in=[me if u == "me" else u for u in users])
    return qs


@extend_schema_view(
    list=extend_schema(
        parameters=[
            *FILTER_PARAMETERS.values(),
            USER_PARAMETER,
            OpenApiParameter(
                "name",
                str,
                description="only names containing this text (repeated: any of them; a comma"
                " is text)",
            ),
            OpenApiParameter(
                "array", str, description="only these job arrays' tasks (ids, comma-separated)"
            ),
        ]
    )
)
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = s.JobSerializer
    # A job file may be sent as it is: `curl --data-binary @job.yaml -H 'Content-Type:
    # application/yaml'`.
    parser_classes = [JSONParser, YAMLParser]
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    def get_queryset(self) -> QuerySet[Job]:
        qs = Job.objects.for_user(self.request.user).select_related(
            "team", "user", "priority_class", "cluster", "array"
        )
        if self.action != "list":
            return qs
        params = self.request.query_params
        for param, lookup in JOB_FILTERS.items():
            if values := _listed(params, param):
                _check_choices(param, values)
                qs = qs.filter(**{lookup: values})
        qs = _of_users(qs, self.request)
        # Repeated only: a name may hold a comma, so one value is one text to look for.
        if names := [n for n in params.getlist("name") if n]:
            containing = Q()
            for n in names:
                containing |= Q(name__icontains=n)
            qs = qs.filter(containing)
        if arrays := _listed(params, "array"):
            try:
                qs = qs.filter(array_id__in=[uuid.UUID(a) for a in arrays])
            except ValueError:
                raise ValidationError({"array": ["must be an array's id (a UUID)"]}) from None
        return qs

    @extend_schema(
        request=JobSpecSerializer,
        responses={201: s.JobSerializer, 200: s.JobSerializer, **errors(409)},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def create(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["the body must be a JSON object"]})
        result = job_services.submit_job(
            request.user, dict(request.data), idempotency_key=_idempotency_key(request)
        )
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(s.JobSerializer(result.job).data, status=code)

    @extend_schema(request=JobSpecSerializer, responses=s.PreviewSerializer)
    @action(detail=False, methods=["post"])
    def preview(self, request: Request) -> Response:
        """Would this job start now? If not: why, its position and estimated start."""
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["the body must be a JSON object"]})
        result = job_services.preview_submit(request.user, dict(request.data))
        return Response(s.PreviewSerializer(result).data)

    @extend_schema(
        request=s.ResubmitSerializer,
        responses={201: s.JobSerializer, 200: s.JobSerializer, **errors(409)},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @action(detail=True, methods=["post"])
    def resubmit(self, request: Request, pk: str) -> Response:
        """Submit a copy of this job as you: its spec, team and pinned cluster; with `array`,
        as an array of those indices (e.g. an array's failed tasks again)."""
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["the body must be a JSON object"]})
        body = s.ResubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = _idempotency_key(request)
        result = job_services.resubmit_job(
            request.user,
            self.get_object(),
            idempotency_key=key,
            array=body.validated_data.get("array"),
        )
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(s.JobSerializer(result.job).data, status=code)

    @extend_schema(request=s.JobUpdateSerializer, responses={200: s.JobSerializer, **errors(409)})
    def partial_update(self, request: Request, pk: str) -> Response:
        """Change a waiting job's priority or time limit, or its array's limit of tasks at
        once (as `scontrol update`); the rest of a job is fixed once submitted."""
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["the body must be a JSON object"]})
        body = s.JobUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = job_services.update_job(request.user, self.get_object(), dict(body.validated_data))
        return Response(s.JobSerializer(job).data)

    @extend_schema(request=None, responses={200: s.JobSerializer, **errors(409)})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        job = job_services.cancel_job(request.user, self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(request=None, responses={200: s.JobSerializer, **errors(409)})
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, pk: str) -> Response:
        """Out of the queue, or stopped (TERM first, to checkpoint) and kept out, until resumed."""
        job = job_services.suspend_job(request.user, self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(request=None, responses={200: s.JobSerializer, **errors(409)})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        """A suspended job back in the queue, where its submit time places it."""
        job = job_services.resume_job(request.user, self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(responses=s.JobEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        return Response(s.JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(
        parameters=[s.LogsQuerySerializer],
        responses={200: s.LogChunkSerializer, **errors(502, 503)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def logs(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        # A plain dict: a QueryDict makes `?stream=` mean "not given" instead of invalid.
        query = s.LogsQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        if asked.get("attempt") is not None and asked["attempt"] > job.attempts:
            had = {0: "no attempts", 1: "1 attempt"}.get(job.attempts, f"{job.attempts} attempts")
            raise ValidationError({"attempt": [f"the job has had {had} so far"]})
        number = job.attempts if asked.get("attempt") is None else asked["attempt"]
        offset, limit = asked["offset"], asked["limit"]
        chunk = read_logs(job, offset=offset, limit=limit, stream=asked["stream"], attempt=number)
        # Up to the last whole character (the next read starts with the one cut), so that
        # `text` read chunk by chunk is the log's text; `data_base64` holds the same bytes.
        piece = decode_chunk(chunk.data, offset, final=chunk.eof)
        # An attempt that has ended (a later one began, or the job ended) is at its end,
        # whatever the backend says, once a read gives no whole character more: a lost
        # job's log never says eof, and a character cut by a killed write is all there is.
        over = number < job.attempts or job.is_terminal
        attempt_eof = chunk.eof or (over and piece.next_offset == offset)
        # A limit under 4 bytes can hold no whole character: the bytes as they are.
        if attempt_eof or (piece.next_offset == offset and len(chunk.data) == limit):
            piece = decode_chunk(chunk.data, offset, final=True)
        data = chunk.data[: piece.next_offset - offset]
        return Response(
            {
                "offset": offset,
                "next_offset": piece.next_offset,
                # The job's end: an attempt's (a suspend, a requeue) is followed by another's.
                "eof": attempt_eof and job.is_terminal and number == job.attempts,
                "attempt_eof": attempt_eof,
                "gone": chunk.gone,
                "text": piece.text,
                "data_base64": base64.b64encode(data).decode(),
                # The attempt read: by default the row's latest, whose external id the log
                # was read by (a job read before this one can name an attempt since requeued).
                "attempt": number,
                "log_id": chunk.source,
            }
        )


QUEUE_LIMIT = 1000
QUEUE_TOTAL_HEADER = "X-Total-Count"


class QueueView(APIView):
    """Pending jobs you can see, in scheduling order, with position, reason and estimate."""

    @extend_schema(
        responses=s.JobSerializer(many=True),
        parameters=[
            FILTER_PARAMETERS["team"],
            FILTER_PARAMETERS["cluster"],
            USER_PARAMETER,
            OpenApiParameter(
                QUEUE_TOTAL_HEADER,
                int,
                OpenApiParameter.HEADER,
                response=True,
                description=f"How many jobs match: the list holds the first {QUEUE_LIMIT}.",
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        qs = (
            Job.objects.for_user(request.user)
            .filter(state=Job.State.PENDING)
            .select_related("team", "user", "priority_class", "cluster", "array")
            # Jobs held out of the queue (no position) last, on SQLite too (NULLs first there).
            .order_by(F("queue_position").asc(nulls_last=True), "submitted_at", "id")
        )
        for param in ("team", "cluster"):
            if values := _listed(request.query_params, param):
                qs = qs.filter(**{JOB_FILTERS[param]: values})
        qs = _of_users(qs, request)
        data = s.JobSerializer(qs[:QUEUE_LIMIT], many=True).data
        total = len(data) if len(data) < QUEUE_LIMIT else qs.count()
        return Response(data, headers={QUEUE_TOTAL_HEADER: str(total)})


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.TeamSerializer
    lookup_field = "slug"
    pagination_class = None

    def get_queryset(self) -> QuerySet[Team]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Team.objects.none()
        return team_services.teams_for(self.request.user).prefetch_related("quotas")  # type: ignore[no-any-return]

    @extend_schema(request=s.MembershipSerializer, responses=s.MembershipSerializer(many=True))
    @action(detail=True, methods=["get", "post"])
    def members(self, request: Request, slug: str) -> Response:
        team = self.get_object()
        if request.method == "POST":
            body = s.MembershipSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            team_services.set_membership(
                request.user,
                team,
                body.validated_data["user"]["username"],
                body.validated_data.get("role"),
            )
        members = team.memberships.select_related("user").order_by("user__username")
        return Response(s.MembershipSerializer(members, many=True).data)

    @extend_schema(
        methods=["PATCH"], request=s.MembershipSerializer, responses=s.MembershipSerializer
    )
    @extend_schema(methods=["DELETE"], responses={204: None, **errors(400, 409)})
    @action(detail=True, methods=["patch", "delete"], url_path=r"members/(?P<username>[^/]+)")
    def member(self, request: Request, slug: str, username: str) -> Response:
        team = self.get_object()
        if request.method == "DELETE":
            team_services.remove_member(request.user, team, username)
            return Response(status=status.HTTP_204_NO_CONTENT)
        get_object_or_404(Membership, team=team, user__username=username)
        body = s.MembershipSerializer(data=s.with_path(request.data, "username", username))
        body.is_valid(raise_exception=True)
        role = body.validated_data.get("role") or ""  # none: refused there, not a no-op
        m = team_services.set_membership(request.user, team, username, role)
        return Response(s.MembershipSerializer(m).data)

    @extend_schema(request=s.QuotaSerializer, responses=s.QuotaSerializer(many=True))
    @action(detail=True, methods=["get", "post"])
    def quotas(self, request: Request, slug: str) -> Response:
        team = self.get_object()
        if request.method == "POST":
            body = s.QuotaSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            values = dict(body.validated_data)
            team_services.set_quota(request.user, team, values.pop("gpu_model"), values)
        # Read afresh: get_queryset's prefetch holds the quotas as they were before a POST.
        quotas = Quota.objects.filter(team=team)
        return Response(s.QuotaSerializer(quotas, many=True).data)

    @extend_schema(methods=["PUT"], request=s.QuotaBodySerializer, responses=s.QuotaSerializer)
    @extend_schema(methods=["DELETE"], responses={204: None, **errors(400)})
    @action(detail=True, methods=["put", "delete"], url_path=r"quotas/(?P<gpu_model>[^/]+)")
    def quota(self, request: Request, slug: str, gpu_model: str) -> Response:
        team = self.get_object()
        if request.method == "DELETE":
            team_services.delete_quota(request.user, team, gpu_model)
            return Response(status=status.HTTP_204_NO_CONTENT)
        body = s.QuotaSerializer(data=s.with_path(request.data, "gpu_model", gpu_model))
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        quota = team_services.set_quota(request.user, team, values.pop("gpu_model"), values)
        return Response(s.QuotaSerializer(quota).data)

    @extend_schema(parameters=[s.UsageQuerySerializer], responses=s.TeamUsageSerializer)
    @action(detail=True, methods=["get"])
    def usage(self, request: Request, slug: str) -> Response:
        """GPU-hours per user and day, and the quotas in use now: for the team's admins."""
        team = self.get_object()
        if not team_services.is_team_admin(request.user, team):
            raise PermissionDenied("only an admin of this team can read its usage")
        query = s.UsageQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        first, last = query.validated_data["first"], query.validated_data["last"]
        summary = team_usage(team, first, last, timezone.now())
        return Response(s.TeamUsageSerializer(summary).data)


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.ClusterSerializer
    lookup_field = "name"
    pagination_class = None
    queryset = Cluster.objects.prefetch_related("nodes")

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        clusters = [self.get_object()] if self.action == "retrieve" else list(self.get_queryset())
        context["layouts"] = gpu_layouts(clusters, self.request.user)
        return context


class PriorityClassViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.PriorityClassSerializer
    lookup_field = "name"
    pagination_class = None
    queryset = PriorityClass.objects.all()


class MeView(APIView):
    """The caller's own account (GET: with a new address waiting for its link), and the
    address a job's `notify` writes to (PATCH: a new one once its owner follows the link
    mailed to it)."""

    def _me(self, request: Request, just_sent: PendingEmail | None = None) -> Response:
        user = request.user
        teams = Membership.objects.filter(user=user).select_related("team").order_by("team__slug")
        pending = just_sent or team_services.pending_email(user)
        return Response(
            s.MeSerializer(
                {
                    "username": user.get_username(),
                    "email": user.email,
                    "is_staff": user.is_staff,
                    "teams": [{"team": m.team.slug, "role": m.role} for m in teams],
                    "pending_email": pending.email if pending else None,
                    "pending_email_expires": pending.expires_at if pending else None,
                    "detail": team_services.pending_email_text(
                        user, pending, just_sent=just_sent is not None
                    )
                    if pending
                    else None,
                }
            ).data
        )

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        return self._me(request)

    @extend_schema(request=s.MeSerializer, responses={200: s.MeSerializer, **errors(503)})
    def patch(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["the body must be a JSON object"]})
        body = s.MeSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        pending = None
        if "email" in body.validated_data:
            pending = team_services.set_email(request.user, body.validated_data["email"])
        return self._me(request, pending)


class TokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = s.TokenSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(responses={201: s.TokenCreatedSerializer})
    def create(self, request: Request) -> Response:
        body = s.TokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, key = team_services.create_token(request.user, body.validated_data["name"])
        response = Response(
            {**s.TokenSerializer(token).data, "key": key}, status=status.HTTP_201_CREATED
        )
        response["Cache-Control"] = "no-store"  # the key is shown once: no cache may keep it
        return response
