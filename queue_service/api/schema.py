"""OpenAPI descriptions drf-spectacular cannot derive by itself: the token scheme, and the
error answers every operation can give (tests/service/test_api_schema.py holds the schema to
what the API really returns)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.settings import spectacular_settings
from rest_framework import serializers

from queue_service.jobs.spec import (
    ENV_NAME,
    LAUNCHER_ENV_PREFIXES,
    MAX_COMMAND_ENV_BYTES,
    MAX_ENV_VALUE_CHARS,
    MAX_ENV_VARS,
    MAX_STRING_BYTES,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
)


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "queue_service.tenancy.auth.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "an API token (gpuq_...)"}


class EnvFieldSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A job spec's env: what EnvField takes."""

    target_class = "queue_service.jobs.spec.EnvField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        pattern = ENV_NAME.pattern.replace("\\Z", "$")  # ECMA's $ is Python's \Z
        schema: dict[str, Any] = {
            "type": "object",
            "maxProperties": MAX_ENV_VARS,
            "additionalProperties": {
                "oneOf": [
                    {"type": "string", "maxLength": MAX_ENV_VALUE_CHARS},
                    {"type": "number"},
                ]
            },
            "description": f"environment variables, NAME: value; names match {pattern}, none of"
            f" {', '.join(sorted(RESERVED_ENV))} or {'*, '.join(RESERVED_ENV_PREFIXES)}*"
            f" (set by gpuq or the backend), nor {'*, '.join(LAUNCHER_ENV_PREFIXES)}* (options"
            f" of srun, sbatch and salloc); each NAME=value at most {MAX_STRING_BYTES:,}"
            f" bytes of UTF-8, and with command at most {MAX_COMMAND_ENV_BYTES:,} in all",
        }
        # OpenAPI 3.0's schemas have no propertyNames (3.1's are JSON Schema): there, the
        # rule on names is in the description only.
        if not str(spectacular_settings.OAS_VERSION).startswith("3.0"):
            schema["propertyNames"] = {
                "pattern": pattern,
                "not": {
                    "anyOf": [
                        {"enum": sorted(RESERVED_ENV)},
                        {"pattern": f"^({'|'.join(RESERVED_ENV_PREFIXES)})"},
                        {"pattern": f"^({'|'.join(LAUNCHER_ENV_PREFIXES)})"},
                    ]
                },
            }
        return schema


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="what went wrong, in a sentence")


# A 400's body: each field of the request names its messages; the whole body's problems come
# under non_field_errors. Nested fields (retries, checkpoint) nest the same way.
VALIDATION_ERROR = {
    "type": "object",
    "description": "field-level messages: {field: [message, ...]}",
    "additionalProperties": {},
    "example": {"gpus_per_node": ["Ensure this value is less than or equal to 16."]},
}

ERROR_TEXT = {
    "400": "the request is not valid: field-level messages",
    "401": "no valid credentials (an API token as Bearer, or a session)",
    "403": "signed in, but not allowed to do this",
    "404": "no such object among those you can see, or no such path",
    "409": "the object is not in a state that allows this now",
    "413": "the body is larger than the site accepts",
    "415": "the body is not JSON",
    "502": "the cluster answered with an error",
    "503": "the cluster did not answer",
}


class GpuqAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema, plus the error answers: 401 and 403 everywhere (every
    endpoint needs a signed-in user), 400 everywhere (a body or query that is not valid, or
    a NUL byte in the path or query), 404 where the path names an object, 413 and 415 where
    a body is parsed. Views add what only they can give (409, 502, 503) through
    extend_schema."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        # Any request may be a 400: a NUL byte in its path or query (middleware.py).
        codes = ["400", "401", "403"]
        if "{" in self.path:
            codes.append("404")
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer():
            codes += ["413", "415"]
        for code in codes:
            if code not in responses:
                responses[code] = self.error_response(code, direction)
        for code, response in responses.items():
            if code in ERROR_TEXT and response.get("description") == "":
                response["description"] = ERROR_TEXT[code]
        return responses

    def error_response(self, code: str, direction: Any) -> dict[str, Any]:
        body = VALIDATION_ERROR if code == "400" else ErrorSerializer
        response: dict[str, Any] = self._get_response_for_code(body, code, direction=direction)
        response["description"] = ERROR_TEXT[code]
        return response


def errors(*codes: int) -> dict[int, Any]:
    """extend_schema responses for the error answers a view gives beyond the usual ones."""
    return {code: VALIDATION_ERROR if code == 400 else ErrorSerializer for code in codes}
