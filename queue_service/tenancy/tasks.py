"""Celery tasks of accounts: thin wrappers that take ids (and JSON values) and call one
service, as queue_service/jobs/tasks.py."""

from __future__ import annotations

import smtplib

from celery import shared_task

from . import services


@shared_task(
    name="gpuq.send_email_confirmation",
    time_limit=60,
    soft_time_limit=50,
    # A mail server down or refusing for now: tried again, with backoff, up to an hour apart.
    autoretry_for=(OSError, smtplib.SMTPException),
    retry_backoff=30,
    retry_backoff_max=3600,
    max_retries=10,
)
def send_email_confirmation(user_id: int, address: str, nonce: str = "") -> None:
    services.send_email_confirmation(user_id, address, nonce)
