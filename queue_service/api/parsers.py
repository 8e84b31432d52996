from __future__ import annotations

import codecs
from typing import Any, NoReturn

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.utils import json

from queue_service.jobs.spec import YamlError, load_yaml_spec
from queue_service.shape import ShapeProblem, shape_problem


def _refuse(problem: ShapeProblem, body: str) -> NoReturn:
    """A problem inside one field is a 400 naming that field, as a serializer's would be;
    one of the whole body is a parse error."""
    if problem.field is not None:
        raise ValidationError({problem.field: [problem.message]})
    raise ParseError(f"{body} {problem.message}")


# shape.py's bound on integers, said before json's int() refuses one of over 4,300 digits
# with Python's advice to call sys.set_int_max_str_digits().
MAX_INT_DIGITS = 3_000
LONG_NUMBER = ShapeProblem(f"holds a number of over {MAX_INT_DIGITS:,} digits", None)


class _LongNumber(Exception):
    pass


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _LongNumber
    return int(text)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, bounded in shape: json's RecursionError on deep nesting is not the
    ValueError DRF turns into a 400, and fields must not see a document deeper or larger
    than a job spec could be (queue_service/shape.py). Size is Django's to bound
    (DATA_UPLOAD_MAX_MEMORY_SIZE; errors.py answers 413)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        # DRF's parse, with integers bounded as they are read.
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            # Text codecs only, as DRF 3.18 checks: bz2 or zlib as a charset would inflate a
            # body Django bounded while compressed.
            "".encode(encoding)
        except (LookupError, UnicodeError):
            raise ParseError(f"Unsupported charset {encoding!r} in the Content-Type") from None
        try:
            text = codecs.getreader(encoding)(stream)
            constant = json.strict_constant if self.strict else None
            data = json.load(text, parse_constant=constant, parse_int=_int)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except _LongNumber:
            _refuse(LONG_NUMBER, "the JSON body")
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        problem = shape_problem(data)
        if problem is not None:
            _refuse(problem, "the JSON body")
        return data


class YAMLParser(parsers.BaseParser):
    """A job file as it is (application/yaml, RFC 9512), for the job endpoints: the same
    loader, bounds and line numbers as the UI's pasted YAML (queue_service/jobs/spec.py)."""

    media_type = "application/yaml"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        # DRF hands JSON the body Django has bounded, and other parsers the raw stream.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestDataTooBig("the YAML body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"YAML parse error - not UTF-8 at byte {exc.start}") from None
        try:
            return load_yaml_spec(text)
        except YamlError as exc:
            if exc.shape is not None:
                _refuse(exc.shape, "the YAML file")
            raise ParseError(f"YAML parse error - {exc}") from None
