"""Settings that fail loudly on bad values (numbers of thousands of digits, an absurd HSTS
max-age, secret files not in UTF-8 or with a byte order mark, SMTP and database URLs, the
public URL, the local workdir), and an embedded round that a failed relayout does not stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from queue_service.settings import (
    database_from_url,
    email_from_url,
    env,
    env_count,
    env_count_or_unlimited,
    env_seconds,
)
from tests.service.test_settings import _check

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "read",
    [
        lambda: env_count("GPUQ_C", 4, maximum=10),
        lambda: env_seconds("GPUQ_C", 0),
        lambda: env_count_or_unlimited("GPUQ_C", 2),
    ],
    ids=["count", "seconds", "count_or_unlimited"],
)
def test_a_whole_number_of_thousands_of_digits_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, read: Any
) -> None:
    # _whole() passes any run of ASCII digits and int() then refuses one over 4300 digits
    # with a bare ValueError: the service stops with a traceback that names no variable.
    monkeypatch.setenv("GPUQ_C", "9" * 5000)
    with pytest.raises(ImproperlyConfigured, match="GPUQ_C"):
        read()


def test_an_absurd_hsts_max_age_stops_the_service_naming_the_variable() -> None:
    # GPUQ_HSTS_SECONDS is read by env_seconds, which has no maximum: 10**30 s (a slip of
    # the keyboard) becomes a promise browsers keep "for its whole max-age", unlike every
    # other duration, which settings.py bounds at ten years.
    result = _check(GPUQ_HTTPS="1", GPUQ_HSTS_SECONDS="1" + "0" * 30)
    assert result.returncode != 0
    assert "GPUQ_HSTS_SECONDS" in result.stderr


def test_a_secret_file_that_is_not_utf8_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # env() catches only OSError around read_text(): a file saved as UTF-16 (Windows
    # PowerShell's `>`) raises UnicodeDecodeError, a traceback that names no variable.
    (tmp_path / "key").write_bytes("from-file\n".encode("utf-16"))
    monkeypatch.setenv("GPUQ_SECRET_FILE", str(tmp_path / "key"))
    with pytest.raises(ImproperlyConfigured, match="GPUQ_SECRET_FILE"):
        env("GPUQ_SECRET")


def test_a_secret_file_saved_with_a_byte_order_mark_reads_without_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # env() strips whitespace but not a UTF-8 BOM (Notepad's "UTF-8 with BOM"): the secret
    # silently starts with U+FEFF (a different SECRET_KEY, a URL whose scheme reads as '').
    (tmp_path / "key").write_bytes(b"\xef\xbb\xbffrom-file\n")
    monkeypatch.setenv("GPUQ_SECRET_FILE", str(tmp_path / "key"))
    assert env("GPUQ_SECRET") == "from-file"


def test_an_smtp_url_with_port_zero_is_refused() -> None:
    # `parsed.port or 25`: port 0 is falsy, so smtp://host:0 silently becomes port 25
    # (DATABASE_URL refuses port 0 with a message).
    with pytest.raises(ImproperlyConfigured, match="GPUQ_SMTP_URL"):
        email_from_url("smtp://mail.example:0")


@pytest.mark.parametrize("url", ["smtp://mail.example?starttls", "smtp://mail.example?tls"])
def test_an_smtp_option_without_a_value_is_refused(url: str) -> None:
    # parse_qs drops options without a value: `?starttls` silently sends mail in clear, and
    # `?tls` is taken although `?tls=1` is refused as an unknown option.
    with pytest.raises(ImproperlyConfigured, match="GPUQ_SMTP_URL"):
        email_from_url(url)


def test_a_database_option_without_a_value_is_not_silently_dropped() -> None:
    # parse_qs drops `sslmode=`: the connection silently uses libpq's default (prefer, which
    # falls back to no TLS) instead of failing on the empty mode.
    try:
        db = database_from_url("postgres://u@db.example/gpuq?sslmode=")
    except ImproperlyConfigured as refused:
        assert "DATABASE_URL" in str(refused)
        return
    assert db["OPTIONS"] == {"sslmode": ""}


def test_a_sqlite_url_with_a_host_and_a_path_does_not_drop_the_path() -> None:
    # With a netloc, database_from_url takes the netloc alone as the file: sqlite://var/x.db
    # silently names the file (or directory) `var` in the repository, the path is ignored.
    try:
        db = database_from_url("sqlite://var/x.sqlite3")
    except ImproperlyConfigured as refused:
        assert "DATABASE_URL" in str(refused)
        return
    assert db["NAME"] == str(REPO / "var" / "x.sqlite3")


@pytest.mark.parametrize("url", ["http:gpuq.example.org", "https://"])
def test_a_public_url_without_a_host_stops_the_service(url: str) -> None:
    # Only the scheme is checked: a URL with no host (a missing `//`) is taken, and every
    # link in every notification points nowhere.
    result = _check(GPUQ_PUBLIC_URL=url)
    assert result.returncode != 0
    assert "GPUQ_PUBLIC_URL" in result.stderr


def test_an_empty_local_workdir_stops_the_service() -> None:
    # Path("") is ".": an empty GPUQ_LOCAL_WORKDIR (an unset variable in an .env file)
    # silently puts every local job under whatever directory each process was started in.
    result = _check(GPUQ_LOCAL_WORKDIR="")
    assert result.returncode != 0
    assert "GPUQ_LOCAL_WORKDIR" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_a_relayout_that_fails_once_neither_fails_the_round_nor_drops_its_dispatches(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    # Embedded, a Kubernetes relayout is applied in a non-robust on_commit hook
    # (snapshot._apply_named_layout_on_commit): one transient error escapes run_cycle, so
    # the round fails and jobs the same cycle admitted are not dispatched (nor later hooks run).
    from k8s_fakeapi import Fault

    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import submit_job
    from queue_service.tenancy.models import Quota
    from tests.conftest import spec
    from tests.service.test_k8s_mig_flow import CONFIGS, one_idle_h100

    def one_idle_h100_and_a_gpu_node(sim: Any) -> None:
        one_idle_h100(sim)
        sim.node("gpu-1", gpus=8)

    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=one_idle_h100_and_a_gpu_node,
        mig_configs=CONFIGS,
        image_default="busybox",
        max_retries=0,
    ) as (
        _,
        sim,
    ):
        body = spec(kind="agent", mig_profile="1g.10gb", priority="high", cluster="k8s")
        del body["gpus_per_node"]
        submit_job(people["alice"], body)
        plain = submit_job(people["alice"], spec(name="plain", cluster="k8s", gpus_per_node=2)).job
        sim.api.inject(Fault("status", code=503, method="PATCH", path_contains="h100-mig", times=1))

        errors = []
        try:
            run_once()
        except Exception as exc:  # gpuq_worker would log the whole round as failed
            errors.append(exc)

        plain.refresh_from_db()
        assert (errors, plain.state) == ([], Job.State.QUEUED), plain.reason
