"""All configuration, read from the environment once. A bad value stops the process with a
message naming the variable; nothing falls back silently.

Secrets may come from VAR or from a file named by VAR_FILE (Docker/Kubernetes secrets)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str | None = None) -> str:
    file_var = os.environ.get(f"{name}_FILE")
    if file_var and os.environ.get(name) is not None:
        # As Docker's official images: which of two values was meant is no guess to make.
        raise ImproperlyConfigured(f"both {name} and {name}_FILE are set: set one of them")
    if file_var:
        try:
            # utf-8-sig: an editor's byte order mark is no part of the secret.
            return Path(file_var).read_text(encoding="utf-8-sig").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_var!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ImproperlyConfigured(f"environment variable {name} is required")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = env(name, "1" if default else "0").strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


# Seconds beyond ten years are no setting anyone means, and datetimes cannot hold them all:
# a half-life of 1e12 s put the usage window before year 1 and failed every cycle.
TEN_YEARS_S = 10 * 365 * 24 * 3600.0


def env_float(
    name: str, default: float, *, minimum: float = 0.0, maximum: float = TEN_YEARS_S
) -> float:
    raw = env(name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):  # float() takes "nan" and "inf"
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be from {minimum:g} to {maximum:g}")
    return value


def _whole(raw: str) -> bool:
    """ASCII digits only: str.isdigit() is also true of "²" and "①", which int() refuses;
    and not thousands of them, which int() refuses too (no setting needs 19 digits)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 18


def env_count(name: str, default: int, *, maximum: int) -> int:
    raw = env(name, str(default)).strip()
    if not _whole(raw) or not 1 <= int(raw) <= maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a whole number from 1 to {maximum}")
    return int(raw)


def _count_or_none(name: str, default: int, word: str) -> int | None:
    """A whole number >= 1, or `word` (any case) for None."""
    raw = env(name, str(default)).strip().lower()
    if raw == word:
        return None
    if not _whole(raw) or int(raw) < 1:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a whole number >= 1 or {word!r}")
    return int(raw)


def env_count_or_unlimited(name: str, default: int) -> int | None:
    return _count_or_none(name, default, "unlimited")


def env_count_or_off(name: str, default: int) -> int | None:
    return _count_or_none(name, default, "off")


def env_seconds(name: str, default: int, *, maximum: float = TEN_YEARS_S) -> int:
    """A whole number of seconds >= 0 (a fraction would be cut, 0.5 to 0: off)."""
    raw = env(name, str(default)).strip()
    if not _whole(raw) or int(raw) > maximum:
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be a whole number of seconds from 0 to {maximum:g}"
        )
    return int(raw)


def env_float_or_off(name: str, default: float | None) -> float | None:
    raw = env(name, "off" if default is None else str(default)).strip().lower()
    if raw == "off":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a number >= 0 or 'off'") from None
    if not value >= 0 or value == float("inf"):
        raise ImproperlyConfigured(f"{name}={raw!r} must be a number >= 0 or 'off'")
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def env_log_level(name: str, default: str) -> str:
    """One of logging's level names, in any case (logging.config takes only upper case)."""
    raw = env(name, default)
    if raw.strip().upper() not in LOG_LEVELS:
        raise ImproperlyConfigured(f"{name}={raw!r} must be one of {', '.join(LOG_LEVELS)}")
    return raw.strip().upper()


def env_list(name: str, default: str, *, required: bool = False) -> list[str]:
    items = [item.strip() for item in env(name, default).split(",") if item.strip()]
    if required and not items:
        raise ImproperlyConfigured(f"{name} is empty: name at least one, comma-separated")
    return items


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    parsed = urlparse(url)
    if not parsed.password:
        return url
    return url.replace(f":{parsed.password}@", ":***@", 1)


def database_from_url(url: str) -> dict[str, object]:
    """sqlite:///path (relative to the repo) or postgres://user:pass@host:port/name."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        # sqlite:///var/x.db is relative to the repo; sqlite:////tmp/x.db is absolute.
        if parsed.netloc and parsed.path:  # sqlite://var/x.db: the file is not the host
            raise ImproperlyConfigured(
                f"DATABASE_URL={url!r}: write a sqlite file as sqlite:///relative/path"
                " or sqlite:////absolute/path"
            )
        if parsed.query:  # Django takes no options from here: `?mode=ro` would be dropped
            raise ImproperlyConfigured(f"DATABASE_URL={url!r}: a sqlite URL takes no ?options")
        path = unquote(parsed.path[1:]) if parsed.netloc == "" else parsed.netloc
        if not path:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r}: sqlite needs a file path")
        full = Path(path) if Path(path).is_absolute() else BASE_DIR / path
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(full),
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    if parsed.scheme in {"postgres", "postgresql"}:
        # Blank values kept: `?sslmode=` dropped would let libpq fall back to its default.
        options = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
        try:
            port = parsed.port
        except ValueError:  # not a number, or out of 0-65535
            port = 0
        if port == 0:
            raise ImproperlyConfigured(
                f"DATABASE_URL={_redacted(url)!r}: the port must be a number from 1 to 65535"
            )
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "gpuq",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "TEST": {"NAME": f"test_{unquote(parsed.path.lstrip('/')) or 'gpuq'}"},
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL={_redacted(url)!r}: scheme must be sqlite:// or postgres://"
        f" (got {parsed.scheme!r})"
    )


def broker_url(url: str) -> str:
    """CELERY_BROKER_URL: empty (the embedded mode) or redis[s]://[user:pass@]host[:port][/db].
    Set, it takes the service out of the embedded mode; a typo would fail only each send."""
    if not url:
        return url
    parsed = urlparse(url)
    shown = f"CELERY_BROKER_URL={_redacted(url)!r}"
    if parsed.scheme not in {"redis", "rediss"} or not parsed.hostname:
        raise ImproperlyConfigured(f"{shown} must be redis://host[:port][/db] or rediss://...")
    try:
        port = parsed.port
    except ValueError:  # not a number, or out of 0-65535
        port = 0
    if port == 0:
        raise ImproperlyConfigured(f"{shown}: the port must be a number from 1 to 65535")
    if not _whole(parsed.path.strip("/") or "0"):
        raise ImproperlyConfigured(f"{shown}: the database after the host must be a number")
    return url


DEBUG = env_bool("GPUQ_DEBUG", False)
SECRET_KEY = env("SECRET_KEY", "dev-insecure-change-me" if DEBUG else None)
# Empty, every request would be a 400 once debug is off.
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver", required=True)
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", "http://127.0.0.1:8000,http://localhost:8000"
)
# Served over HTTPS (TLS ends at a proxy that sets X-Forwarded-Proto): cookies only over TLS,
# plain HTTP redirected. HSTS is a separate promise browsers keep for its whole max-age, so
# it is off until GPUQ_HSTS_SECONDS says otherwise.
HTTPS = env_bool("GPUQ_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_HSTS_SECONDS = env_seconds("GPUQ_HSTS_SECONDS", 0)
if SECURE_HSTS_SECONDS and not HTTPS:
    raise ImproperlyConfigured("GPUQ_HSTS_SECONDS needs GPUQ_HTTPS=1")
# Promises for the whole domain, not only gpuq's host: the operator's to make.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GPUQ_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("GPUQ_HSTS_PRELOAD", False)

DATABASES = {"default": database_from_url(env("DATABASE_URL", "sqlite:///var/gpuq.sqlite3"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Empty broker: the embedded mode, where `manage.py gpuq_worker` runs cycles, dispatch and
# sync in one process and nothing is enqueued.
CELERY_BROKER_URL = broker_url(env("CELERY_BROKER_URL", ""))
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 120
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Mail goes through a queue of its own (a worker with -Q mail): a mail server that hangs
# must not hold the slots of cycles, syncs and dispatches.
CELERY_TASK_ROUTES = {
    "gpuq.send_notification": {"queue": "mail"},
    "gpuq.deliver_notifications": {"queue": "mail"},
    "gpuq.send_email_confirmation": {"queue": "mail"},
}

GPUQ_CYCLE_INTERVAL_S = env_float("GPUQ_CYCLE_INTERVAL_S", 5.0, minimum=0.1)
GPUQ_SYNC_INTERVAL_S = env_float("GPUQ_SYNC_INTERVAL_S", 5.0, minimum=0.1)
GPUQ_DEFAULT_TIME_LIMIT_S = env_float("GPUQ_DEFAULT_TIME_LIMIT_S", 24 * 3600.0, minimum=60)
GPUQ_MAX_TIME_LIMIT_S = env_float("GPUQ_MAX_TIME_LIMIT_S", 30 * 24 * 3600.0, minimum=60)
# Over the maximum, the default would give every job without a time_limit more than it allows.
if GPUQ_DEFAULT_TIME_LIMIT_S > GPUQ_MAX_TIME_LIMIT_S:
    raise ImproperlyConfigured(
        f"GPUQ_DEFAULT_TIME_LIMIT_S={GPUQ_DEFAULT_TIME_LIMIT_S:.15g} exceeds"
        f" GPUQ_MAX_TIME_LIMIT_S={GPUQ_MAX_TIME_LIMIT_S:.15g}:"
        " lower the default or raise the maximum"
    )
# Tasks in one job array (Slurm's MaxArraySize is 1001): each is a job row, made in one
# transaction, so the ceiling keeps one submit's insert bounded.
GPUQ_MAX_ARRAY_TASKS = env_count("GPUQ_MAX_ARRAY_TASKS", 1000, maximum=100_000)
GPUQ_FAIR_SHARE_HALF_LIFE_S = env_float("GPUQ_FAIR_SHARE_HALF_LIFE_S", 7 * 24 * 3600.0, minimum=1)
GPUQ_PREEMPTION_GRACE_S = env_float("GPUQ_PREEMPTION_GRACE_S", 30.0)
GPUQ_MIN_RUNTIME_S = env_float("GPUQ_MIN_RUNTIME_S", 0.0)
# After this many preemptions a job is not preempted for priority again ("unlimited": never).
GPUQ_MAX_PRIORITY_PREEMPTIONS = env_count_or_unlimited("GPUQ_MAX_PRIORITY_PREEMPTIONS", 2)
# After this many preemptions (reclaim or priority) a job starts again only within its team's
# nominal quota and is preempted no more ("off": never protected). The default is
# scheduler.types.Policy's.
GPUQ_PROTECT_AFTER_PREEMPTIONS = env_count_or_off("GPUQ_PROTECT_AFTER_PREEMPTIONS", 1)
# A priority preemption may throw away at most this many GPU-seconds of work per GPU-second
# of waiting it saves, the wait read from time limits ("off": any). Reclaim of nominal quota
# is never weighed. The default is scheduler.types.Policy's.
GPUQ_PREEMPTION_LOSS_RATIO = env_float_or_off("GPUQ_PREEMPTION_LOSS_RATIO", 0.5)
# A job refused quota that has waited this many seconds holds its team's nominal quota
# against the team's later jobs, as a job waiting for nodes does ("off": never, the default,
# as in scheduler.types.Policy: holding idles quota and costs utilization).
GPUQ_QUOTA_HOLD_AFTER_S = env_float_or_off("GPUQ_QUOTA_HOLD_AFTER_S", None)
# Whether preemptible classes (normal, low) preempt lower classes for priority, or only
# non-preemptible ones (high) do. Reclaim of nominal quota is not affected.
GPUQ_PREEMPTIBLE_CLASSES_PREEMPT = env_bool("GPUQ_PREEMPTIBLE_CLASSES_PREEMPT", False)
# The dispatch_job task's hard time limit (tasks.py). A sync resubmits a dispatch older than
# GPUQ_DISPATCH_STALE_S: a younger one may still be submitting, and two submits of one attempt
# at once can both create its workload.
DISPATCH_TIME_LIMIT_S = 120
GPUQ_DISPATCH_STALE_S = env_float("GPUQ_DISPATCH_STALE_S", 120.0, minimum=DISPATCH_TIME_LIMIT_S)


def email_address(name: str, value: str) -> str:
    """One plain address (a typo here would make every notification unsendable)."""
    from email.utils import getaddresses

    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    found = getaddresses([value])
    try:
        if len(found) != 1 or not found[0][1]:
            raise ValidationError("not one address")
        validate_email(found[0][1])
    except ValidationError:
        raise ImproperlyConfigured(f"{name}={value!r} is not one email address") from None
    return value


def email_from_url(url: str) -> dict[str, object]:
    """Django's email settings from GPUQ_SMTP_URL: smtp://[user:pass@]host[:port] (STARTTLS
    with ?starttls=1), smtps://... (TLS from the start); empty: mail is printed on the
    sending process's standard output instead (the embedded mode's default)."""
    if not url:
        return {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}
    parsed = urlparse(url)
    shown = f"GPUQ_SMTP_URL={_redacted(url)!r}"
    if parsed.scheme not in {"smtp", "smtps"} or not parsed.hostname:
        raise ImproperlyConfigured(f"{shown} must be smtp://[user:pass@]host[:port] or smtps://...")
    # Blank values kept: a bare `?starttls` is refused, not read as no option (clear text).
    query = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
    if set(query) - {"starttls"} or query.get("starttls", "1") not in {"0", "1"}:
        raise ImproperlyConfigured(f"{shown}: the only option is starttls=0|1")
    try:
        given = parsed.port
    except ValueError:
        raise ImproperlyConfigured(f"{shown}: the port is not a number") from None
    if given == 0:
        raise ImproperlyConfigured(f"{shown}: the port must be a number from 1 to 65535")
    port = given or (465 if parsed.scheme == "smtps" else 25)
    encrypted = parsed.scheme == "smtps" or query.get("starttls") == "1"
    if parsed.password and not encrypted and parsed.hostname not in {"127.0.0.1", "localhost"}:
        raise ImproperlyConfigured(
            f"{shown}: a password would cross the network in clear; add ?starttls=1 or use smtps://"
        )
    return {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": parsed.hostname,
        "EMAIL_PORT": port,
        "EMAIL_HOST_USER": unquote(parsed.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(parsed.password or ""),
        "EMAIL_USE_SSL": parsed.scheme == "smtps",
        "EMAIL_USE_TLS": parsed.scheme == "smtp" and query.get("starttls") == "1",
    }


# Job notifications (a spec's `notify`, as Slurm's --mail-type) go to the submitter's email.
globals().update(email_from_url(env("GPUQ_SMTP_URL", "")))
EMAIL_TIMEOUT = 10  # seconds: a stuck mail server must not hold a worker
DEFAULT_FROM_EMAIL = email_address("GPUQ_EMAIL_FROM", env("GPUQ_EMAIL_FROM", "gpuq@localhost"))
# Where gpuq's pages are, for links in notifications.
GPUQ_PUBLIC_URL = env("GPUQ_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
_public = urlparse(GPUQ_PUBLIC_URL)
try:
    _public_port = _public.port
except ValueError:  # not a number, or out of 0-65535
    _public_port = 0
# Links are this plus a path: a ?query or #fragment would swallow the path.
if (
    _public.scheme not in {"http", "https"}
    or not _public.hostname
    or _public_port == 0
    or "?" in GPUQ_PUBLIC_URL
    or "#" in GPUQ_PUBLIC_URL
):
    raise ImproperlyConfigured(
        f"GPUQ_PUBLIC_URL={GPUQ_PUBLIC_URL!r} must be an http(s) URL with a host, a port"
        " from 1 to 65535 if any, and no ?query or #fragment"
    )
_workdir = env("GPUQ_LOCAL_WORKDIR", str(BASE_DIR / "var" / "local-jobs")).strip()
if not _workdir:  # Path("") is ".": wherever each process happened to start
    raise ImproperlyConfigured("GPUQ_LOCAL_WORKDIR is empty; give the local jobs' directory")
# A relative path is the project directory's (as a sqlite:/// file is): every process (web
# server, worker, one started from elsewhere) must find the same running jobs.
GPUQ_LOCAL_WORKDIR = BASE_DIR / _workdir

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "queue_service.tenancy",
    "queue_service.clusters",
    "queue_service.jobs",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # /static/ under gunicorn too (runserver serves it only in debug): before the rest, so
    # a stylesheet costs no session or CSRF work.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "queue_service.middleware.RejectNulBytes",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "queue_service.urls"
WSGI_APPLICATION = "queue_service.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
# A form from a page drawn before its user signed in again (Django rotates the token then):
# the app's page saying nothing was changed, linking back, not Django's bare 403.
CSRF_FAILURE_VIEW = "frontend.views.common.csrf_failure"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
# WhiteNoise serves the files from the apps where they are (found at start-up): a server
# needs no collectstatic first and never serves a stale copy, so there is no STATIC_ROOT.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "queue_service.tenancy.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only: a job spec does not survive form encoding, and the schema says what is taken.
    "DEFAULT_PARSER_CLASSES": ["queue_service.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "queue_service.api.schema.GpuqAutoSchema",
    "DEFAULT_PAGINATION_CLASS": "queue_service.api.pagination.JobCursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "queue_service.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpuq API",
    "DESCRIPTION": "Submit, follow and cancel GPU jobs; read queues, quotas and clusters.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1 (JSON Schema 2020-12) can say which env names the server takes (propertyNames).
    "OAS_VERSION": "3.1.0",
    # Swagger UI's assets come from the package, not a CDN: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refusal": {"()": "queue_service.logfilters.RefusalWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"filters": ["refusal"]}},
    "root": {"handlers": ["console"], "level": env_log_level("GPUQ_LOG_LEVEL", "INFO")},
}
