from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from queue_service.shape import shape_problem


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, bounded in shape: json's RecursionError on deep nesting is not the
    ValueError DRF turns into a 400, and fields must not see a document deeper or larger
    than a job spec could be (queue_service/shape.py). Size is Django's to bound
    (DATA_UPLOAD_MAX_MEMORY_SIZE; errors.py answers 413)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        problem = shape_problem(data)
        if problem is not None:
            raise ParseError(f"the JSON body {problem}")
        return data
