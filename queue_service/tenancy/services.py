"""Team administration: members, roles, quotas and API tokens. Team admins act on their own
team within the limits site staff set on it; staff may act on any team."""

from __future__ import annotations

import logging
import math
import secrets
import smtplib
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import EmailMessage
from django.core.validators import EmailValidator, MaxLengthValidator
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError

from queue_service.echoes import SHOWN_CHARS

from .models import ApiToken, Membership, PendingEmail, Quota, Team

log = logging.getLogger(__name__)

# Sums of GPU amounts within this of a ceiling are at it: MIG slices are sevenths, which
# floats hold inexactly (1/7 + 5/7 + 9/7 + 6/7 is 3.0000000000000004). The scheduler's own.
GPU_TOLERANCE = 1e-9


class MemberHasActiveJobs(APIException):
    """A 409: the member's jobs that have not ended would stay charged to the team while
    they could no longer see or cancel them (Slurm's sacctmgr: "Job(s) active, cancel job(s)
    before remove")."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "member_has_active_jobs"


def quoted(text: str) -> str:
    """`text` as messages quote it, cut to its first SHOWN_CHARS characters and "…"."""
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…")


def is_team_admin(user: Any, team: Team) -> bool:
    return (
        bool(user.is_staff)
        or Membership.objects.filter(user=user, team=team, role=Membership.Role.ADMIN).exists()
    )


def require_team_admin(user: Any, team: Team) -> None:
    if not is_team_admin(user, team):
        raise PermissionDenied("only an admin of this team can change it")


def teams_for(user: Any) -> Any:
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user)


def set_membership(actor: Any, team: Team, username: str, role: str | None) -> Membership:
    """Add a member or change a member's role. `role` None: a new member is a member, an
    existing one keeps their role (adding someone again must not demote an admin)."""
    require_team_admin(actor, team)
    if role is not None and role not in Membership.Role.values:
        raise ValidationError({"role": [f"must be one of {', '.join(Membership.Role.values)}"]})
    if not username:
        raise ValidationError({"username": ["give a username"]})
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError({"username": [f"no active user {quoted(username)}"]})
    with transaction.atomic():
        _lock_team(actor, team)
        if role is None:
            membership, _ = Membership.objects.get_or_create(
                user=user, team=team, defaults={"role": Membership.Role.MEMBER}
            )
        else:
            membership, _ = Membership.objects.update_or_create(
                user=user, team=team, defaults={"role": role}
            )
        _keep_an_admin(team)
    return membership


def remove_member(actor: Any, team: Team, username: str) -> None:
    require_team_admin(actor, team)
    with transaction.atomic():
        _lock_team(actor, team)
        # Locked: a submit of the member's holds it too (jobs.services._keep_membership).
        membership = (
            Membership.objects.select_for_update(of=("self",))
            .filter(team=team, user__username=username)
            .select_related("user", "team")
            .first()
        )
        if membership is None:
            raise ValidationError(
                {"username": [f"{quoted(username)} is not a member of {team.slug}"]}
            )
        _refuse_with_active_jobs(membership)
        membership.delete()
        _keep_an_admin(team)


def _refuse_with_active_jobs(membership: Membership) -> None:
    from queue_service.jobs.models import Job  # jobs' models import tenancy's

    by_state = dict(
        Job.objects.filter(team_id=membership.team_id, user_id=membership.user_id)
        .exclude(state__in=Job.TERMINAL)
        .values("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    if by_state:
        count = sum(by_state.values())
        name, team = membership.user.get_username(), membership.team.slug
        raise MemberHasActiveJobs(
            f"{name} has {count} job{'s' if count > 1 else ''} in {team} that "
            f"{'have' if count > 1 else 'has'} not ended ("
            + ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
            + f"): cancel them, or wait for them to end, before removing {name}"
        )


def _lock_team(actor: Any, team: Team) -> Team:
    """One change of a team's members or quotas at a time: the team's row FOR UPDATE, as it
    is now (its ceilings too), the actor's right read again under it. Two admins demoting
    each other at once would otherwise each see the other still an admin, and leave the team
    with none; two adding quotas at once would each sum the quotas without the other's, and
    together pass the team's ceiling."""
    locked = Team.objects.select_for_update().get(pk=team.pk)
    require_team_admin(actor, locked)
    return locked


def _keep_an_admin(team: Team) -> None:
    if not Membership.objects.filter(team=team, role=Membership.Role.ADMIN).exists():
        raise ValidationError({"role": ["a team must keep at least one admin"]})


OPTIONAL_QUOTA_LIMITS = ("borrowing_limit_gpus", "lending_limit_gpus", "max_running_jobs")


def set_quota(
    actor: Any,
    team: Team,
    gpu_model: str,
    values: dict[str, Any],
    *,
    new: bool = False,
    existing: bool = False,
) -> Quota:
    """Create or replace a team's quota for one GPU model, within the site's ceilings. A limit
    left out is no limit: a replace keeps nothing of the old quota. `new`: only create (a
    form for adding one must not replace a quota added meanwhile); `existing`: only change
    (a quota's own form must not re-create one deleted meanwhile)."""
    require_team_admin(actor, team)
    values = {**dict.fromkeys(OPTIONAL_QUOTA_LIMITS), **values}
    with transaction.atomic():
        team = _lock_team(actor, team)
        old = team.quotas.filter(gpu_model=gpu_model).first()
        if new and old is not None:
            raise ValidationError(
                {"gpu_model": [f"the team has a {gpu_model} quota already: change it in its form"]}
            )
        if existing and old is None:
            raise ValidationError(
                {"gpu_model": ["this quota was deleted meanwhile; add it again if you want it"]}
            )
        _check_quota(actor, team, gpu_model, values, old)
        quota, _ = Quota.objects.update_or_create(team=team, gpu_model=gpu_model, defaults=values)
    return quota


def _check_quota(
    actor: Any, team: Team, gpu_model: str, values: dict[str, Any], old: Quota | None
) -> None:
    """A team admin stays within the site's ceilings; where the team is past one already (the
    site lowered it), a change that does not go further past it is still taken, so the admin
    can move back under it."""
    errors: dict[str, list[str]] = {}
    lending = values.get("lending_limit_gpus")
    if lending is not None and lending > values["nominal_gpus"]:
        # A team lends only GPUs it is guaranteed (Kueue: lendingLimit <= nominalQuota).
        errors["lending_limit_gpus"] = [
            f"at most the nominal quota ({values['nominal_gpus']:g} GPUs): a team lends only"
            " the GPUs it is guaranteed"
        ]
    if not actor.is_staff:
        nominal_elsewhere = sum(q.nominal_gpus for q in team.quotas.exclude(gpu_model=gpu_model))
        nominal = values["nominal_gpus"]
        if nominal_elsewhere + nominal > team.max_nominal_gpus + GPU_TOLERANCE and nominal > (
            old.nominal_gpus if old else 0
        ):
            errors["nominal_gpus"] = [
                f"the team's nominal quotas may add up to {team.max_nominal_gpus:g} GPUs "
                f"(other models already take {nominal_elsewhere:g})"
            ]
        # Summed as the nominal quotas are: checked per quota, N quotas could borrow N times
        # the team's ceiling. A limit staff left empty (none) elsewhere leaves no room.
        borrowing = values.get("borrowing_limit_gpus")
        was = old.borrowing_limit_gpus if old else 0
        limits = team.quotas.exclude(gpu_model=gpu_model).values_list(
            "borrowing_limit_gpus", flat=True
        )
        elsewhere = sum(math.inf if limit is None else limit for limit in limits)
        room = max(0.0, team.max_borrowing_gpus - elsewhere)
        taken = "no limit" if math.isinf(elsewhere) else f"{elsewhere:g}"
        ceiling = (
            f"at most {room:g} GPUs"
            + (f" ({taken} taken by its other quotas)" if elsewhere else "")
            + f": the borrowing limits of its quotas may add up to {team.max_borrowing_gpus:g}"
            " GPUs for this team (set by the site)"
        )
        if borrowing is None:  # omitted, or null: no limit, which only site staff may set
            errors["borrowing_limit_gpus"] = [f"a team admin must give a limit: {ceiling}"]
        elif elsewhere + borrowing > team.max_borrowing_gpus + GPU_TOLERANCE and (
            was is not None and borrowing > was
        ):
            errors["borrowing_limit_gpus"] = [ceiling]
    if errors:
        raise ValidationError(errors)


def delete_quota(actor: Any, team: Team, gpu_model: str) -> None:
    require_team_admin(actor, team)
    with transaction.atomic():
        _lock_team(actor, team)
        deleted, _ = Quota.objects.filter(team=team, gpu_model=gpu_model).delete()
    if not deleted:
        raise ValidationError({"gpu_model": [f"no quota for {gpu_model!r}"]})


def create_token(user: Any, name: str) -> tuple[ApiToken, str]:
    """Returns the token row and the key, which is shown this once and never stored. A user's
    tokens have names of their own: the same form sent twice makes one token, not two."""
    taken = ValidationError(
        {
            "name": [
                f"you have a token named {quoted(name)} already: give this one another name,"
                " or revoke that one first"
            ]
        }
    )
    if ApiToken.objects.filter(user=user, name=name).exists():
        raise taken
    key = ApiToken.new_key()
    try:
        with transaction.atomic():  # two at once: the second meets the unique constraint
            token = ApiToken.objects.create(
                user=user, name=name, key_hash=ApiToken.hash_key(key), hint=key[:10]
            )
    except IntegrityError:
        raise taken from None
    return token, key


# RFC 5321's limit on a path (and Django's EmailField's max_length, as Notification.to).
EMAIL_MAX_LENGTH = 254
# A new address is where `notify` writes once its owner follows the link mailed to it (as
# GitHub and GitLab confirm one): otherwise anyone could have gpuq mail someone else's inbox.
EMAIL_CONFIRM_MAX_AGE = PendingEmail.MAX_AGE
EMAIL_CONFIRM_SALT = "gpuq.tenancy.confirm-email"
_EXPIRED = (
    f"This link has expired: links work for {EMAIL_CONFIRM_MAX_AGE.days} days. "
    "Ask for a new one on your account page."
)


class MailNotSent(APIException):
    """A 503: the link could not be mailed or queued now (a mail server or broker down)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "mail_not_sent"


def site_sends_no_email() -> bool:
    """Workers with the console backend (GPUQ_SMTP_URL unset) would print mail in their logs
    and call it sent. The embedded mode's console backend prints it where `make run` shows it."""
    return bool(settings.CELERY_BROKER_URL) and settings.EMAIL_BACKEND.endswith(
        "console.EmailBackend"
    )


def set_email(user: Any, address: str) -> PendingEmail | None:
    """Set the address a job's `notify` writes to (jobs.notify), as its owner asks. Surrounding
    whitespace is dropped. An empty one clears it at once, the one it has is left as it is;
    either drops the request waiting for its link, if any, and returns None. A new one is not
    set: it is stored as the request waiting, in place of any other (whose link then no longer
    works), a link to confirm it is mailed to it (`confirm_email` sets it), and the request is
    returned. A link that cannot be mailed or queued is MailNotSent, with the request that
    waited before put back: no request waits that no mail announced."""
    address = _checked_email(address)
    with transaction.atomic():
        locked = _locked(user)
        before = PendingEmail.objects.filter(user=locked).first()
        if not address or address == locked.email:
            PendingEmail.objects.filter(user=locked).delete()
            if not address:
                _store_email(locked, "")
            user.email = locked.email
            return None
        if site_sends_no_email():
            raise ValidationError(
                {
                    "email": [
                        "this site sends no email (GPUQ_SMTP_URL is not set), "
                        "so no address can be confirmed"
                    ]
                }
            )
        pending, _ = PendingEmail.objects.update_or_create(
            user=locked,
            defaults={
                "email": address,
                "nonce": secrets.token_urlsafe(16),
                "requested_at": timezone.now(),
            },
        )
    # Mailed after the commit: the mail worker reads the request, and no row lock (on SQLite
    # the whole database) is held while a mail server takes its time.
    if settings.CELERY_BROKER_URL:
        from .tasks import send_email_confirmation as task

        try:
            task.delay(user.pk, address, pending.nonce)
        except Exception:
            log.warning("could not queue the confirmation of %s", user.pk, exc_info=True)
            _put_back(user, pending, before)
            raise MailNotSent(
                "the confirmation link could not be queued for sending: try again later"
            ) from None
    else:  # the embedded mode: no worker to hand it to
        try:
            send_email_confirmation(user.pk, address, pending.nonce)
        except (OSError, smtplib.SMTPException):
            log.warning("could not mail the confirmation of %s", user.pk, exc_info=True)
            _put_back(user, pending, before)
            raise MailNotSent(
                f"the confirmation link could not be sent to {address} now (the mail server "
                "refused it or did not answer): try again later"
            ) from None
    return pending


def _put_back(user: Any, unsent: PendingEmail, before: PendingEmail | None) -> None:
    """Undo a request whose link did not go, unless a later request replaced it meanwhile."""
    still = PendingEmail.objects.filter(user_id=user.pk, nonce=unsent.nonce)
    if before is None:
        still.delete()
    else:
        still.update(email=before.email, nonce=before.nonce, requested_at=before.requested_at)


def pending_email(user: Any) -> PendingEmail | None:
    """The request waiting for its link to be followed, while that link still works."""
    return PendingEmail.objects.filter(
        user_id=user.pk, requested_at__gt=timezone.now() - EMAIL_CONFIRM_MAX_AGE
    ).first()


def pending_email_text(user: Any, pending: PendingEmail, *, just_sent: bool = False) -> str:
    """What the account says of a request waiting for its link: `just_sent`, in the answer
    of the set_email that mailed it."""
    now = user.email or "no address"
    works = (
        f"it works for {EMAIL_CONFIRM_MAX_AGE.days} days"
        if just_sent
        else f"it works until {pending.expires_at:%Y-%m-%d %H:%M} UTC"
    )
    return (
        f"a confirmation link was sent to {pending.email}; notify writes to {now} until you "
        f"follow it ({works})"
    )


def email_confirmation_token(user: Any, pending: PendingEmail) -> str:
    """A signed, timed token for `user` to take the address of the request `pending`: its
    nonce makes it that request's alone (another request replaces it; following it ends it),
    and `was` the address they have now (one changed otherwise, by staff, stops it)."""
    return signing.dumps(
        {"user": user.pk, "email": pending.email, "nonce": pending.nonce, "was": user.email},
        salt=EMAIL_CONFIRM_SALT,
    )


def send_email_confirmation(user_id: int, address: str, nonce: str = "") -> None:
    """Mail `address` the link that makes it the user's (by Celery's task, or in process),
    while it is the request waiting (`nonce`: a task queued before requests were stored has
    none, and its link would not work)."""
    from django.urls import reverse

    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None or user.email == address:
        return  # gone, or confirmed already by an earlier link
    pending = PendingEmail.objects.filter(user=user, email=address, nonce=nonce).first()
    if pending is None or pending.expires_at <= timezone.now():
        return  # replaced, dropped or followed meanwhile, or out of time (the retries')
    token = email_confirmation_token(user, pending)
    link = settings.GPUQ_PUBLIC_URL + reverse("email-confirm", args=[token])
    now = f"they go to {user.email}" if user.email else "no job can email the account"
    body = (
        f"The gpuq account {user.get_username()} asked to have its jobs' emails sent to this "
        f"address. To confirm, open this link and press its button (it works once, until "
        f"{pending.expires_at:%Y-%m-%d %H:%M} UTC):\n\n{link}\n\n"
        f"Until then {now}. If it was not you, ignore this email: nothing changes.\n"
    )
    EmailMessage(
        "[gpuq] Confirm your email address", body, settings.DEFAULT_FROM_EMAIL, [address]
    ).send()


class EmailLinkRefused(ValidationError):
    """A link that sets no address: `message` says why (a 400 at `token`)."""

    def __init__(self, message: str) -> None:
        super().__init__({"token": [message]})
        self.message = message


def email_token_address(user: Any, token: str) -> str:
    """The address `token` confirms for `user`, or EmailLinkRefused (`_followed`). A link
    already followed gives the address it set while the user still has it."""
    return _followed(user, token)[0]


def _followed(user: Any, token: str) -> tuple[str, PendingEmail | None]:
    """The address `token` confirms for `user`, with the request it ends (None: a link
    already followed, whose address the user has). EmailLinkRefused: a token gpuq did not sign
    (or cut short), one older than EMAIL_CONFIRM_MAX_AGE (or of a request that is), one for
    another account, one of a request replaced by a newer one, one used already or whose
    request was dropped, or one made before staff changed the address."""
    try:
        what = signing.loads(
            token, salt=EMAIL_CONFIRM_SALT, max_age=EMAIL_CONFIRM_MAX_AGE.total_seconds()
        )
    except signing.SignatureExpired:
        raise EmailLinkRefused(_EXPIRED) from None
    except (signing.BadSignature, ValueError):
        raise EmailLinkRefused(
            "This link is not one gpuq sent: it may have been cut short. Copy it whole from "
            "the email, or ask for a new one on your account page."
        ) from None
    if (
        not isinstance(what, dict)
        or not isinstance(what.get("email"), str)
        or not isinstance(what.get("was"), str)
    ):
        raise EmailLinkRefused("This link is not one gpuq sent.")
    if what.get("user") != user.pk:
        raise EmailLinkRefused(
            "This link was sent for another account: sign in as that account to follow it."
        )
    address = str(what["email"])
    pending = PendingEmail.objects.filter(user_id=user.pk).first()
    ours = pending is not None and pending.nonce == what.get("nonce") and pending.email == address
    if address == user.email:
        return address, pending if ours else None
    if pending is None:
        raise EmailLinkRefused(
            "This link no longer works: it has been used already, or the change it asked "
            "for was called off (your address was set or cleared since it was sent). Ask for "
            "a new one on your account page."
        )
    if not ours:
        raise EmailLinkRefused(
            f"A newer link was sent since this one, to {pending.email}: only the latest one "
            "works. Follow it, or ask for a new one on your account page."
        )
    if pending.expires_at <= timezone.now():
        raise EmailLinkRefused(_EXPIRED)
    if what["was"] != user.email:
        raise EmailLinkRefused(
            "Your address has changed since this link was sent, so it no longer works. "
            "Ask for a new one on your account page."
        )
    return address, pending


def confirm_email(user: Any, token: str) -> str:
    """Make the address `token` confirms `user`'s (EmailLinkRefused if it confirms none), and
    end its request, so that the link works once; returns it. The user's row is locked: of
    two links followed at once, one sets its address and the other finds its request gone."""
    with transaction.atomic():
        locked = _locked(user)
        address, pending = _followed(locked, token)
        if pending is not None:
            pending.delete()
        if address != locked.email:
            _store_email(locked, address)
    user.email = address
    return address


def _locked(user: Any) -> Any:
    """The user's row FOR UPDATE: one change of their address or its request at a time."""
    return get_user_model().objects.select_for_update().get(pk=user.pk)


def _checked_email(address: str) -> str:
    address = address.strip()
    if address:
        problems: list[str] = []
        for validator in (MaxLengthValidator(EMAIL_MAX_LENGTH), EmailValidator()):
            try:
                validator(address)
            except DjangoValidationError as exc:
                problems.extend(exc.messages)
        if problems:
            raise ValidationError({"email": problems})
    return address


def _store_email(user: Any, address: str) -> None:
    user.email = address
    user.save(update_fields=["email"])


def revoke_token(user: Any, token_id: int) -> None:
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    if not deleted:
        raise ValidationError({"token": ["no such token"]})
