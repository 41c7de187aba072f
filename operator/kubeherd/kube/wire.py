"""The API server's wire conventions, as the client needs them: bodies encoded, the server's
own message read from a refusal, throttling and its Retry-After, and the Kubernetes verb of a
request (the client's metrics name requests by it)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

# The longest a throttled request waits, whatever Retry-After asks.
MAX_RETRY_AFTER = 30.0


def throttled(response: Any) -> bool:
    """The API server asks to be asked again later: 429 (priority and fairness), or a 5xx with
    Retry-After (a server starting, or shutting down gracefully)."""
    status = int(response.status)
    return status == 429 or (status >= 500 and "Retry-After" in response.headers)


def retry_after(header: str | None) -> float:
    """Seconds to wait from a Retry-After header (the API server sends whole seconds): 1 s
    when it is missing or not a number, never more than MAX_RETRY_AFTER."""
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:
        return 1.0
    if not math.isfinite(seconds):
        return 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


_SURROGATE_PAIR = re.compile(rb"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def json_for_yaml(body: Any) -> bytes:
    """JSON that a YAML parser reads as the same data.

    JSON writes a character beyond the Basic Multilingual Plane (an emoji, say) as two escaped
    surrogates, which YAML refuses as invalid characters; YAML's own escape for it is one
    `\\UXXXXXXXX`. Everything else stays ASCII, with JSON's escapes, which YAML shares."""

    def as_yaml(match: re.Match[bytes]) -> bytes:
        high, low = int(match[1], 16), int(match[2], 16)
        code_point = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        return b"\\U%08x" % code_point

    return _SURROGATE_PAIR.sub(as_yaml, json.dumps(body).encode())


def encode_body(body: Any) -> bytes | None:
    """A request body: bytes as they are, plain data as JSON."""
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def api_message(body: bytes, status: int) -> str:
    """The message of the API server's Status; else the status code and the body's start."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else f"HTTP {status}: {body[:200]!r}"


def request_verb(method: str, path: str, query: Sequence[tuple[str, str]] | None = None) -> str:
    """The Kubernetes verb of a request, as the API server's own metrics name it: a GET is a
    get, a list or a watch; a DELETE of a collection is a deletecollection."""
    method = method.upper()
    if method == "GET" and any(
        key == "watch" and value in ("true", "1") for key, value in query or ()
    ):
        return "watch"
    simple = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in simple:
        return simple[method]
    collection = _is_collection(path)
    if method == "GET":
        return "list" if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return method.lower()


def _is_collection(path: str) -> bool:
    """/api/v1/pods, /api/v1/namespaces/x/pods, /apis/g/v/namespaces/x/things: a collection;
    one more segment names an object (and two, its subresource)."""
    segments = [segment for segment in path.split("?", 1)[0].split("/") if segment]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return False
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) == 1
