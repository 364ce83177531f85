"""Request bodies and response bodies of the REST API, through orjson.

Parsing: several times faster than the standard library on the request bodies a resolve carries;
nesting past 64 levels, a number jsonb and the renderer do not round-trip, and a string with a NUL
character or an unpaired surrogate refused with a 400 naming its field, never handed to the
estimator or the database (``core/text_limits.py``). Rendering: the same compact UTF-8 JSON DRF
writes, with DRF's own forms of the values JSON has no type for (times with ``Z`` and
milliseconds, decimals, UUIDs, lazy strings), and for whatever is already stored (an integer past
64 bits, nesting past orjson's limit: ``core/safe_json.py``)."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from contextplatform.core import safe_json, text_limits


class AnyJSONParser(JSONParser):
    """Every API body is JSON, whatever Content-Type the client sent (curl -d sends a form type)."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return text_limits.loads(stream.read())
        except text_limits.MalformedJson as error:
            raise ParseError(f"JSON parse error - {error}") from None


_drf_forms = JSONEncoder()


class FastJSONRenderer(JSONRenderer):
    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None:
            return b""
        if self.get_indent(accepted_media_type or "", renderer_context or {}):
            return super().render(data, accepted_media_type, renderer_context)  # asked to indent
        return safe_json.dumps(
            data,
            default=_drf_forms.default,
            option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS,
        )
