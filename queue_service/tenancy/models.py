from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models


class Team(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=128)
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])
    # Ceilings the site sets on sums over a team's quotas (nominal GPUs; borrowing limits):
    # a team admin's quotas must stay within them.
    max_nominal_gpus = models.FloatField(default=64, validators=[MinValueValidator(0)])
    max_borrowing_gpus = models.FloatField(default=64, validators=[MinValueValidator(0)])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member"
        ADMIN = "admin"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Quota(models.Model):
    """Per team per GPU model ("*" = any model the team has no quota of its own for). Counts
    are GPUs; a MIG slice counts as compute_slices / 7 (/ 4 on A30)."""

    ANY_MODEL = "*"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.CharField(max_length=64)
    nominal_gpus = models.FloatField(validators=[MinValueValidator(0)])
    borrowing_limit_gpus = models.FloatField(
        null=True, blank=True, default=0, validators=[MinValueValidator(0)]
    )
    lending_limit_gpus = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    max_running_jobs = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["team", "gpu_model"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_model"], name="one_quota_per_model")
        ]

    def __str__(self) -> str:
        return f"{self.team}:{self.gpu_model} nominal={self.nominal_gpus}"


class ApiToken(models.Model):
    """Named API tokens. Only a SHA-256 of the key is stored; the key is shown once."""

    PREFIX = "gpuq_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=64)
    key_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16)  # the first characters, to tell tokens apart
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # A user's tokens are told apart by name (a form sent twice makes one, not two).
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="token_name_per_user")]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def new_key(cls) -> str:
        return cls.PREFIX + secrets.token_urlsafe(32)


class PendingEmail(models.Model):
    """A new notify address its owner asked for and has not confirmed yet (as allauth's
    EmailConfirmation): one per user, the latest request. The link mailed for it carries its
    nonce, so it works once, and only while this is the request waiting
    (tenancy.services.set_email / confirm_email)."""

    # How long the link works: from the request, as the page and the API say.
    MAX_AGE = timedelta(days=3)

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    email = models.CharField(max_length=254)
    nonce = models.CharField(max_length=64)
    requested_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.email} (asked {self.requested_at:%Y-%m-%d %H:%M})"

    @property
    def expires_at(self) -> datetime:
        return self.requested_at + self.MAX_AGE
