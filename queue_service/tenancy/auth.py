from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from .models import ApiToken


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gpuq_...` (or `Token gpuq_...`)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'")
        key = header[1].decode(errors="replace")
        token = (
            ApiToken.objects.select_related("user").filter(key_hash=ApiToken.hash_key(key)).first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return "Bearer"
