"""Settings are environment reads that fail loudly, naming the variable."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from queue_service.settings import (
    database_from_url,
    email_address,
    email_from_url,
    env,
    env_bool,
    env_count,
    env_count_or_unlimited,
    env_float,
    env_float_or_off,
)

REPO = Path(__file__).resolve().parents[2]


def test_sqlite_urls_are_relative_to_the_repo() -> None:
    db = database_from_url("sqlite:///var/x.sqlite3")
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(REPO / "var" / "x.sqlite3")


def test_sqlite_urls_with_four_slashes_are_absolute() -> None:
    assert database_from_url("sqlite:////tmp/gpuq.db")["NAME"] == "/tmp/gpuq.db"


def test_postgres_urls_carry_credentials_and_options() -> None:
    db = database_from_url("postgres://u:p%40ss@db.example:6543/gpuq?sslmode=require")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "u",
        "p@ss",
        "db.example",
        "6543",
        "gpuq",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


@pytest.mark.parametrize("url", ["mysql://x/y", "sqlite://", "nonsense"])
def test_unsupported_database_urls_are_refused(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url(url)


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("true", True), ("off", False)])
def test_booleans_parse(monkeypatch: pytest.MonkeyPatch, raw: str, value: bool) -> None:
    monkeypatch.setenv("GPUQ_X", raw)
    assert env_bool("GPUQ_X", not value) is value


def test_a_bad_boolean_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUQ_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="GPUQ_X='maybe'"):
        env_bool("GPUQ_X", False)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("ten", "GPUQ_N='ten' is not a number"),
        ("-1", "GPUQ_N='-1' must be from 0 to 3.1536e+08"),
        # Seconds no datetime can go back (a half-life of 1e12 s failed every cycle).
        ("1e12", "GPUQ_N='1e12' must be from 0 to 3.1536e+08"),
    ],
)
def test_a_bad_too_small_or_too_large_number_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str, says: str
) -> None:
    monkeypatch.setenv("GPUQ_N", raw)
    with pytest.raises(ImproperlyConfigured) as refused:
        env_float("GPUQ_N", 1.0)
    assert str(refused.value) == says


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e999"])
def test_a_number_that_is_not_finite_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    # float() takes all of these; a cycle interval of nan would never fire.
    monkeypatch.setenv("GPUQ_N", raw)
    with pytest.raises(ImproperlyConfigured, match=f"GPUQ_N='{raw}' is not a finite number"):
        env_float("GPUQ_N", 1.0)


@pytest.mark.parametrize(("raw", "value"), [("3", 3), ("unlimited", None), (" 1 ", 1)])
def test_counts_parse(monkeypatch: pytest.MonkeyPatch, raw: str, value: int | None) -> None:
    monkeypatch.setenv("GPUQ_C", raw)
    assert env_count_or_unlimited("GPUQ_C", 2) == value


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_bad_count_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("GPUQ_C", raw)
    with pytest.raises(ImproperlyConfigured, match=r"GPUQ_C.*'unlimited'"):
        env_count_or_unlimited("GPUQ_C", 2)


@pytest.mark.parametrize("raw", ["0", "11", "-1", "ten", "2.0", ""])
def test_a_bounded_count_out_of_its_range_names_the_variable_and_the_range(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("GPUQ_C", raw)
    assert env_count("GPUQ_X", 4, maximum=10) == 4
    message = f"GPUQ_C='{raw}' must be a whole number from 1 to 10"
    with pytest.raises(ImproperlyConfigured, match=message):
        env_count("GPUQ_C", 4, maximum=10)
    monkeypatch.setenv("GPUQ_C", " 10 ")
    assert env_count("GPUQ_C", 4, maximum=10) == 10


@pytest.mark.parametrize(("raw", "value"), [("1", 1.0), ("0.5", 0.5), ("0", 0.0), ("OFF", None)])
def test_ratios_parse(monkeypatch: pytest.MonkeyPatch, raw: str, value: float | None) -> None:
    monkeypatch.setenv("GPUQ_R", raw)
    assert env_float_or_off("GPUQ_R", 1.0) == value


@pytest.mark.parametrize(("raw", "value"), [(None, None), ("off", None), ("259200", 259200.0)])
def test_a_setting_off_by_default_parses(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, value: float | None
) -> None:
    if raw is None:
        monkeypatch.delenv("GPUQ_R", raising=False)
    else:
        monkeypatch.setenv("GPUQ_R", raw)
    assert env_float_or_off("GPUQ_R", None) == value


@pytest.mark.parametrize("raw", ["-1", "half", "nan", "inf", ""])
def test_a_bad_ratio_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("GPUQ_R", raw)
    with pytest.raises(ImproperlyConfigured, match=r"GPUQ_R.*'off'"):
        env_float_or_off("GPUQ_R", 1.0)


def test_secrets_can_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv("GPUQ_SECRET_FILE", str(tmp_path / "key"))
    assert env("GPUQ_SECRET") == "from-file"
    monkeypatch.setenv("GPUQ_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="GPUQ_SECRET_FILE"):
        env("GPUQ_SECRET")


def test_a_setting_given_both_as_itself_and_as_a_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Which of the two was meant is no guess to make (Docker's official images refuse it
    too); the message names both."""
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv("GPUQ_SECRET_FILE", str(tmp_path / "key"))
    monkeypatch.setenv("GPUQ_SECRET", "from-env")
    with pytest.raises(ImproperlyConfigured, match="both GPUQ_SECRET and GPUQ_SECRET_FILE"):
        env("GPUQ_SECRET")


def test_the_service_refuses_to_start_without_a_secret_key() -> None:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("SECRET_KEY", "GPUQ_DEBUG"))
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "environment variable SECRET_KEY is required" in result.stderr


def test_the_policy_settings_default_to_the_schedulers_own_defaults() -> None:
    # Unset, the service's policy settings are Policy()'s defaults: the simulator and bench/
    # measure the policy the service runs.
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "GPUQ_FAIR_SHARE",
                "GPUQ_PREEMPTION",
                "GPUQ_MIN_RUNTIME",
                "GPUQ_MAX_PRIORITY",
                "GPUQ_PROTECT",
                "GPUQ_QUOTA_HOLD",
            )
        )
    }
    environ.setdefault("SECRET_KEY", "test-only")
    code = (
        "import django, os;"
        " os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'queue_service.settings');"
        " django.setup(); from queue_service.jobs.snapshot import policy;"
        " from scheduler.types import Policy; print(policy() == Policy())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def _check(
    *args: str, django_key: str = "test-only", **extra: str
) -> subprocess.CompletedProcess[str]:
    """`manage.py check ARGS` with only these GPUQ_ settings: none of the test run's own (the
    browser tests allow async unsafe calls, which the deploy check rightly refuses)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUQ_", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"))
    }
    environ.update(SECRET_KEY=django_key, **extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _deploy_check(**extra: str) -> subprocess.CompletedProcess[str]:
    """As a deployment's check, with a production-grade key."""
    key = "x" * 60 + "-a-long-random-production-key"
    return _check("--deploy", "--fail-level", "WARNING", django_key=key, **extra)


def test_behind_tls_the_deploy_check_is_clean() -> None:
    # GPUQ_HTTPS=1: secure cookies, the proxy's X-Forwarded-Proto trusted, HTTP redirected.
    result = _deploy_check(
        GPUQ_HTTPS="1",
        GPUQ_HSTS_SECONDS="31536000",
        GPUQ_HSTS_INCLUDE_SUBDOMAINS="1",
        GPUQ_HSTS_PRELOAD="1",
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_without_tls_the_deploy_check_names_what_is_missing() -> None:
    result = _deploy_check()
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr


def test_hsts_without_https_is_refused() -> None:
    result = _deploy_check(GPUQ_HSTS_SECONDS="3600")
    assert result.returncode != 0
    assert "GPUQ_HSTS_SECONDS needs GPUQ_HTTPS=1" in result.stderr


def test_a_test_run_holds_the_machine_wide_lab_lock() -> None:
    # What makes a second run (another checkout, say) wait instead of flushing this run's
    # Redis database and cancelling its Slurm jobs.
    from queue_service.testenv import LOCK_PATH

    probe = (
        "import fcntl, sys\n"
        f"f = open({LOCK_PATH!r})\n"
        "try:\n"
        "    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(3)\n"
    )
    taken = subprocess.run([sys.executable, "-c", probe], timeout=60, check=False)
    assert taken.returncode == 3, "the lab lock is free while tests run"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("", {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}),
        (
            "smtp://mail.example:2525",
            {"EMAIL_HOST": "mail.example", "EMAIL_PORT": 2525, "EMAIL_USE_TLS": False},
        ),
        (
            "smtp://u%40x:p%3Ass@mail.example?starttls=1",
            {
                "EMAIL_PORT": 25,
                "EMAIL_HOST_USER": "u@x",
                "EMAIL_HOST_PASSWORD": "p:ss",
                "EMAIL_USE_TLS": True,
                "EMAIL_USE_SSL": False,
            },
        ),
        ("smtps://mail.example", {"EMAIL_PORT": 465, "EMAIL_USE_SSL": True}),
    ],
)
def test_smtp_urls_parse(url: str, expected: dict[str, object]) -> None:
    settings = email_from_url(url)
    assert {k: settings[k] for k in expected} == expected


@pytest.mark.parametrize(
    "url",
    [
        "mailto:x@example.org",
        "smtp://",
        "smtp://mail.example?tls=1",
        "smtp://h?starttls=yes",
        "smtp://mail.example:port",
    ],
)
def test_a_bad_smtp_url_names_the_variable(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="GPUQ_SMTP_URL"):
        email_from_url(url)


def test_a_bad_public_url_stops_the_service() -> None:
    result = _deploy_check(GPUQ_PUBLIC_URL="gpuq.example.org")
    assert result.returncode != 0
    assert "GPUQ_PUBLIC_URL='gpuq.example.org' must be an http(s) URL" in result.stderr


def test_a_password_in_a_bad_smtp_url_is_not_repeated() -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        email_from_url("smtp://u:hunter2@mail.example:port?starttls=1")
    assert "hunter2" not in str(info.value)
    assert "smtp://u:***@mail.example" in str(info.value)


def test_a_password_over_plain_smtp_is_refused_except_on_loopback() -> None:
    with pytest.raises(ImproperlyConfigured, match="would cross the network in clear"):
        email_from_url("smtp://u:p@mail.example")
    assert email_from_url("smtp://u:p@127.0.0.1:2525")["EMAIL_HOST_PASSWORD"] == "p"
    assert email_from_url("smtp://u:p@mail.example?starttls=1")["EMAIL_USE_TLS"] is True


@pytest.mark.parametrize(
    "value", ["gpuq@example.org>", "a@example.org, b@example.org", "gpuq@", "", "gpuq"]
)
def test_a_from_address_that_is_not_one_address_names_the_variable(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"GPUQ_EMAIL_FROM=.* is not one email address"):
        email_address("GPUQ_EMAIL_FROM", value)


@pytest.mark.parametrize("value", ["gpuq@example.org", "gpuq <gpuq@example.org>"])
def test_a_from_address_may_carry_a_name(value: str) -> None:
    assert email_address("GPUQ_EMAIL_FROM", value) == value


def test_a_default_time_limit_over_the_maximum_stops_the_service_naming_both() -> None:
    # A maximum of 1 h alone would leave every job that gives no time_limit the default 24 h.
    result = _check(GPUQ_MAX_TIME_LIMIT_S="3600")
    assert result.returncode != 0
    assert "GPUQ_DEFAULT_TIME_LIMIT_S=86400 exceeds GPUQ_MAX_TIME_LIMIT_S=3600" in result.stderr
    result = _check(GPUQ_MAX_TIME_LIMIT_S="3600", GPUQ_DEFAULT_TIME_LIMIT_S="3600")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("level", ["LOUD", "", "20"])
def test_a_bad_log_level_stops_the_service_naming_the_variable(level: str) -> None:
    result = _check(GPUQ_LOG_LEVEL=level)
    assert result.returncode != 0
    assert f"GPUQ_LOG_LEVEL={level!r} must be one of DEBUG, INFO, WARNING" in result.stderr


@pytest.mark.parametrize("level", ["debug", "Warning"])
def test_log_levels_are_taken_in_any_case(level: str) -> None:
    result = _check(GPUQ_LOG_LEVEL=level)
    assert result.returncode == 0, result.stderr[-400:]


@pytest.mark.parametrize("earlier_run", [False, True])
def test_run_embedded_keeps_its_secret_key_and_var_to_their_owner(
    tmp_path: Path, earlier_run: bool
) -> None:
    # The key signs session cookies: whoever reads it can sign in as the staff user. Made
    # under the usual umask 022, and also when an earlier run left them readable.
    (tmp_path / "deploy").mkdir()
    shutil.copy(REPO / "deploy" / "run-embedded", tmp_path / "deploy" / "run-embedded")
    stub = tmp_path / ".venv" / "bin" / "python"  # migrate, gpuq_demo, gpuq_worker, runserver
    stub.parent.mkdir(parents=True)
    # `-c` (the key's making, the port's check) as the real one: a stub's silence was the key.
    stub.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\nexit 0\n')
    stub.chmod(0o755)
    if earlier_run:
        (tmp_path / "var").mkdir(mode=0o755)
        (tmp_path / "var" / "secret_key").write_text("an-earlier-key\n")
        (tmp_path / "var" / "secret_key").chmod(0o644)
    subprocess.run(
        ["bash", "-c", 'umask 022; exec bash "$0"', str(tmp_path / "deploy" / "run-embedded")],
        cwd=tmp_path,
        env={**os.environ, "DATABASE_URL": "sqlite:///var/x.sqlite3"},
        capture_output=True,
        timeout=60,
        check=False,
    )
    for path, mode in ((tmp_path / "var", 0o700), (tmp_path / "var" / "secret_key", 0o600)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, (
            f"{path.name} is {oct(path.stat().st_mode)}"
        )
    assert (tmp_path / "var" / "secret_key").read_text().strip()


@pytest.mark.django_db
def test_the_local_backend_works_where_the_service_setting_says(
    settings: Any, tmp_path: Path
) -> None:
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import backend_for

    settings.GPUQ_LOCAL_WORKDIR = tmp_path / "jobs"
    default = Cluster.objects.create(name="here", kind="local", settings={})
    own = Cluster.objects.create(name="there", kind="local", settings={"workdir": "/srv/x"})
    assert backend_for(default).workdir == tmp_path / "jobs" / f"cluster.{default.pk}"
    assert backend_for(own).workdir == Path("/srv/x")


def test_the_quota_hold_setting_reaches_the_schedulers_policy(settings: Any) -> None:
    from queue_service.jobs.snapshot import policy

    assert policy().quota_hold_after_s is None
    settings.GPUQ_QUOTA_HOLD_AFTER_S = 3 * 24 * 3600.0
    assert policy().quota_hold_after_s == 259200.0
