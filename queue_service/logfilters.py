"""Filters for the settings' LOGGING."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class RefusalWithoutTraceback(logging.Filter):
    """Django logs a 403 from PermissionDenied with its traceback; a refusal is no fault of
    the code, so it keeps the one warning line other 4xx get."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
