"""Every way a model call can fail, sorted once for every backend and transport: ``Retryable``
for what another attempt may get past, ``ModelError`` for what it will not, each with a detail
that says what happened and, where the fix is the caller's, what to fix.

- An HTTP error status (``Failures.status``): 429, 408, 409, 425, 5xx and 529 are retried (with
  the server's ``retry-after``), but not a 429 for a spent quota (``QUOTA_KINDS``); 401/403 name
  the key variable; 404 names the model and URL; 413 says the request is too large for the
  server or a proxy; a redirect is not followed (it could carry
  the key to another host) and names its target; another 3xx (a 304) is no answer either;
  any other status is final. A server's ``x-should-retry`` (``true``/``false``) decides
  before the status, as in both official SDKs. The body is read
  as the protocol's error object when it is one, else its text (an HTML page: its title)
  stands in; bytes that are not text (a compressed body not decoded) are named by their size,
  never shown.
- An error object where the answer should be (``Failures.reported``, ``is_error``): a 200 body
  or a stream event with an ``error``, ``type: error`` or ``object: error``, a failed response.
  Retried (after the answer's ``retry-after``, as for a status) when its type or code says the
  server failed (``server_error``, ``overloaded_error`` …, a 5xx or 429 code) or says nothing;
  final when it names the request as the problem
  (``invalid_request_error`` …).
- A broken answer (``unusable``): the body or stream is not the protocol's shape, or the turn
  has neither text nor a tool call, or two calls share an id — retried.
- An answer compressed in a coding the client did not offer (``encoding``): final; a name
  that is no compression (``utf-8``) is passed over, the body read as it is.
- A transport failure (``transport``): a timeout, a dropped connection, a body that does not
  decode — retried.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit

from tether.errors import ModelError
from tether.models._retrying import Retryable

__all__ = [
    "AGAIN_STATUSES",
    "COMPRESSIONS",
    "QUOTA_KINDS",
    "RETRYABLE_KINDS",
    "Failures",
    "Reported",
    "codings",
    "error_body",
    "is_error",
    "is_text",
    "retry_after",
    "said_by",
    "unusable",
]

# Error types and codes a provider sends (OpenAI's ``type``/``code``, Anthropic's
# ``error.type``) that say the server, not the request, failed: another attempt may pass.
RETRYABLE_KINDS = frozenset(
    {
        "api_error",
        "engine_overloaded",
        "internal_error",
        "internal_server_error",
        "overloaded",
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "server_error",
        "service_unavailable",
        "timeout",
        "timeout_error",
    }
)
# Kinds a 429 carries when the account, not the rate, is the limit: no wait lifts it (OpenAI's
# ``insufficient_quota``: "You exceeded your current quota").
QUOTA_KINDS = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
# Statuses under 500 that say the request may be sent again as it is: 408 Request Timeout, 409
# Conflict, 425 Too Early (RFC 8470: the server would not risk a replay; the client may retry),
# 429 Too Many Requests (``Failures.status`` reads its quota kinds first).
AGAIN_STATUSES = frozenset({408, 409, 425, 429})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})  # the statuses that send the client elsewhere
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAGS = re.compile(r"<[^>]+>")


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's wait in seconds from ``retry-after-ms`` or ``retry-after`` (seconds, or an
    HTTP date: the time until it, 0 when it has passed); None when neither says one. A header
    sent twice (a proxy that adds its own beside the server's: the client joins them, ``5, 30``)
    waits the longest of the numbers it holds: before, the joined text was no number, the wait
    was lost, and the rate-limited server was asked again at once."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            seconds = _joined(value, scale)
        if seconds >= 0:
            return seconds
    return None


# The rate-limit headers a 429 may carry instead of a ``retry-after``: Anthropic's
# ``anthropic-ratelimit-<limit>-remaining`` / ``-reset`` (an RFC 3339 time) and OpenAI's
# ``x-ratelimit-remaining-<limit>`` / ``x-ratelimit-reset-<limit>`` (a duration, ``6m0s``).
# Other gateways write them under no limit's name (``x-ratelimit-reset``) or by the IETF draft
# (``ratelimit-remaining`` / ``ratelimit-reset``), and a reset as a bare number of seconds
# (Cerebras' ``x-ratelimit-reset-tokens-minute: 11.38``) or a Unix time.
_LIMIT_HEADER = re.compile(
    r"(?:anthropic-ratelimit-(?P<a>[a-z-]+)-(?P<af>remaining|reset)"
    r"|x-ratelimit-(?P<of>remaining|reset)(?:-(?P<o>[a-z-]+))?|ratelimit-(?P<if>remaining|reset))"
)
_DURATION = re.compile(r"(?:([0-9.]+)h)?(?:([0-9.]+)m(?!s))?(?:([0-9.]+)s)?(?:([0-9.]+)ms)?")
_NUMBER = re.compile(r"[0-9]{1,16}(?:\.[0-9]{0,9})?")  # a reset as a bare number
_UNIX_TIME = 1e9  # a bare reset this large is a time (2001 on), not seconds to wait
_UNIX_MS = 1e12  # … and this large, in milliseconds


def rate_reset(headers: Mapping[str, str]) -> float | None:
    """A 429's wait from its rate-limit headers when it sends no ``retry-after``: until the
    latest reset of the limits it says are spent (``remaining`` 0), else the soonest reset of
    those it says nothing of; None when they tell none. Before, such a 429 was asked again after
    a backoff of milliseconds, each retry spent against a limit that had said when it resets."""
    limits: dict[str, dict[str, str]] = {}
    for name, value in headers.items():
        if m := _LIMIT_HEADER.fullmatch(name.lower()):
            limit = m["a"] or m["o"] or ""
            limits.setdefault(limit, {})[m["af"] or m["of"] or m["if"]] = str(value).strip()
    spent: list[float] = []
    untold: list[float] = []
    for said in limits.values():
        wait = _reset_in(said.get("reset", ""))
        if wait is None:
            continue
        if said.get("remaining") in ("0", "0.0"):
            spent.append(wait)
        elif "remaining" not in said:
            untold.append(wait)
    return max(spent) if spent else min(untold) if untold else None


def _reset_in(value: str) -> float | None:
    """Seconds until a rate limit's reset: an RFC 3339 time (0 once passed), a duration (``1s``,
    ``6m0s``, ``20ms``), or a bare number: seconds, or past ``_UNIX_TIME`` a Unix time (in
    milliseconds past ``_UNIX_MS``; 0 once passed); None when it is none of these."""
    from datetime import UTC, datetime

    if not value:
        return None
    if _NUMBER.fullmatch(value):
        number = float(value)
        if number < _UNIX_TIME:
            return number
        return max(0.0, (number / 1000 if number >= _UNIX_MS else number) - time.time())
    if (m := _DURATION.fullmatch(value)) and any(m.groups()):
        try:
            h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
        except ValueError:
            return None
        return h * 3600 + mi * 60 + s + ms / 1000
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _joined(value: str, scale: float) -> float:
    """A ``retry-after`` that is no single number: a header sent more than once, joined by the
    client with commas (``5, 30``; two HTTP dates, each with its own comma after the weekday; a
    number and a date; a proxy's word beside the server's number): the longest wait any of its
    values says (an HTTP date for ``retry-after`` only); -1 when none says one. Before, two
    dates were read as the first alone (the shorter wait lost), and a number beside a date or a
    word as no wait at all (the rate-limited server asked again at once)."""
    parts = [part.strip() for part in value.split(",")]
    waits: list[float] = []
    at = 0
    while at < len(parts):
        field = parts[at]
        if field[:3].lower() in _WEEKDAYS and at + 1 < len(parts):  # ``Wed, 21 Oct 2015 …``
            field, at = f"{field}, {parts[at + 1]}", at + 1
        at += 1
        try:
            wait = float(field) / scale
        except ValueError:
            wait = _until(field) if scale == 1.0 else -1.0
        if wait >= 0:  # NaN and negatives say no wait
            waits.append(wait)
    return max(waits, default=-1.0)


_WEEKDAYS = frozenset({"mon", "tue", "wed", "thu", "fri", "sat", "sun"})


def _until(date: str) -> float:
    """Seconds from now until an HTTP date (0 when it has passed); -1 when it is not one (a
    year past any calendar's overflows the parser: no date either, not a crash)."""
    from datetime import UTC, datetime
    from email.utils import parsedate_to_datetime  # only when a server sends a date

    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return -1.0
    if when.tzinfo is None:  # an HTTP date is GMT; one that says no zone is read as such
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def is_error(data: Mapping[str, object]) -> bool:
    """Whether a JSON object where an answer or a stream event should be is an error object, in
    any protocol's form: an ``error`` field (OpenAI, OpenRouter, llama.cpp), ``type: error``
    (Anthropic, a Responses ``error`` event), ``object: error`` (vLLM, LocalAI). An ``error``
    that says nothing (``null``, ``{}``, an object of nulls: a translating proxy that writes every
    field of its schema beside a good answer) is none: before, such an answer was refused as an
    error and retried to ``model_error``."""
    said = data.get("error")
    if isinstance(said, dict) and said and all(v in (None, "", [], {}) for v in said.values()):
        said = None
    return bool(said) or data.get("type") == "error" or data.get("object") == "error"


_STATUS = re.compile(r"[0-9]{3}")  # a status code written as text
_CANONICAL = re.compile(r"[A-Z]+(?:_[A-Z]+)*")  # a Google status: ``RESOURCE_EXHAUSTED``
_NO_KIND = frozenset({"error", "None", "null"})  # what names no kind (a proxy writes a null as text)


def error_body(body: object) -> tuple[str | None, str, bool | None]:
    """An error object's kind (``type`` and ``code`` where they differ), its message, and
    whether it says another attempt may pass (None: it does not say). Reads every form the
    protocols use: ``{"error": {...}}``, Anthropic's ``{"type": "error", "error": {...}}``, a
    Responses ``error`` event (``code`` and ``message`` at the top), a bare string. A status
    code written as text (``"code": "503"``, as LiteLLM's proxy writes every code) is that
    number, as ``503`` is; a kind written ``"None"`` is none. An error object in a one-item list
    (Google's OpenAI-compatible endpoint: ``[{"error": {"code": 400, "message": …, "status":
    "INVALID_ARGUMENT"}}]``) is that object, its ``status`` a kind; any other value is said as
    itself (text as it is, the rest as JSON), never as Python's repr."""
    inner = _listed(body)
    if isinstance(inner, dict):
        inner = inner.get("error", inner)
    if not isinstance(inner, dict):
        return None, (inner if isinstance(inner, str) else _as_json(inner))[:500], None
    names: list[str] = []
    numeric: int | None = None
    for key in ("type", "code", "status"):
        value = inner.get(key)
        if key == "status" and not (isinstance(value, str) and _CANONICAL.fullmatch(value)):
            continue  # only Google's canonical codes (``INVALID_ARGUMENT``) name a kind there
        if isinstance(value, str) and _STATUS.fullmatch(value.strip()):  # "503": a code as text (LiteLLM)
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            numeric = value
        elif isinstance(value, str) and value and value not in _NO_KIND and value not in names:
            names.append(value)
    kind = " / ".join(names) or None
    message = _said(inner.get("message") or inner.get("detail"), inner)[:500]
    if any(n.lower() in RETRYABLE_KINDS for n in names):
        return kind, message, True
    if numeric is not None:
        return kind or str(numeric), message, numeric >= 500 or numeric in AGAIN_STATUSES
    return kind, message, (False if names else None)


def _listed(body: object) -> object:
    """The error a body holds as the only item of a list (or a one-item list's text), else the
    body."""
    if isinstance(body, list) and len(body) == 1 and isinstance(body[0], dict | str):
        return body[0]
    return body


def body_delay(body: object) -> float | None:
    """The wait an error body says in Google's ``RetryInfo`` (``"details": [{"@type":
    "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}]``), as Google's clients
    read it when no header says one; None when it says none."""
    inner = _listed(body)
    inner = inner.get("error", inner) if isinstance(inner, dict) else None
    details = inner.get("details") if isinstance(inner, dict) else None
    for detail in details if isinstance(details, list) else ():
        said = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(said, str) and (m := _SECONDS.fullmatch(said.strip())):
            return float(m.group(1))
    return None


_SECONDS = re.compile(r"([0-9]{1,9}(?:\.[0-9]{0,9})?)s")  # a protobuf Duration in JSON: "3s", "1.5s"


def _said(told: object, inner: dict[str, Any]) -> str:
    """What an error object says in words: its message; a list of field errors (FastAPI's
    ``detail: [{"loc": …, "msg": …}]``, a 422) as each field and its message; else the object as
    JSON, or that it gives no details (``{}``: a Responses ``failed`` status with no ``error``)
    rather than Python's repr of it."""
    if isinstance(told, list) and told and all(isinstance(d, dict) and d.get("msg") for d in told):
        return "; ".join(f"{'.'.join(map(str, d.get('loc') or ())) or 'request'}: {d['msg']}" for d in told)
    if told and not isinstance(told, (dict, list)):
        return str(told)
    if not inner:
        return "(no error details given)"
    return _as_json(told or inner)


def _as_json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # a circular or too deep object: its repr, bounded above
        return str(value)


def _json_or_none(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _text(raw: bytes) -> tuple[str | None, str, bool | None]:
    """An error answer's body: the protocol's error object, or what its text says."""
    try:
        return error_body(json.loads(raw))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        pass
    if not is_text(raw):  # compressed or binary bytes: their size is all they say
        return None, f"({len(raw)} bytes that are not text)", None
    title = _TITLE.search(raw)
    text = (title.group(1) if title else raw[:2000]).decode("utf-8", "replace")
    return None, " ".join(_TAGS.sub(" ", text).split())[:300] or "(empty body)", None


_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")  # no text holds these (tabs, newlines aside)


def is_text(raw: bytes) -> bool:
    """Whether a body reads as text, in any charset: no control characters (tabs and line
    breaks aside) in its first 2000 bytes. Compressed or binary bytes all but always hold some
    (gzip's first two bytes do)."""
    return _CONTROL.search(raw, 0, 2000) is None


@dataclass(frozen=True, slots=True)
class Failures:
    """The failures of one backend, named for it: ``label`` (the model), the key variable and
    whether it is set, the URL it posts to."""

    label: str
    key_env: str
    key_set: bool
    url: str

    def status(self, status: int, body: bytes | object, headers: Mapping[str, str]) -> Exception:
        """The error for an HTTP answer with an error (or redirect) status: as its status says
        (``_by_status``), unless the server says itself whether another try may pass
        (``x-should-retry: true`` or ``false``, which both official SDKs obey before the
        status; a redirect is not followed either way)."""
        kind, message, _ = _text(body) if isinstance(body, bytes) else error_body(body)
        detail = f"HTTP {status}: {kind + ': ' if kind else ''}{message}"
        err = self._by_status(status, kind, detail, headers)
        if isinstance(err, Retryable) and err.retry_after is None:  # no header said a wait
            err.retry_after = body_delay(_json_or_none(body) if isinstance(body, bytes) else body)
        said = str(headers.get("x-should-retry", "")).strip().lower()
        if said == "false" and isinstance(err, Retryable):
            return ModelError(
                f"{self.label}: {detail} (x-should-retry: false: the server says not to try again)"
            )
        if said == "true" and isinstance(err, ModelError) and status >= 400:
            return Retryable("server_error", f"{detail} (x-should-retry: true)", retry_after(headers))
        return err

    def _by_status(self, status: int, kind: str | None, detail: str, headers: Mapping[str, str]) -> Exception:
        if status == 429:
            if any(k in QUOTA_KINDS for k in (kind or "").split(" / ")):
                return ModelError(
                    f"{self.label}: {detail} (a quota or billing limit, not a rate: not retried)"
                )
            wait = retry_after(headers)
            return Retryable("rate_limited", detail, rate_reset(headers) if wait is None else wait)
        if status >= 500 or status in AGAIN_STATUSES:
            kind_name = "overloaded" if status == 529 or "overloaded" in (kind or "") else "server_error"
            return Retryable(kind_name, detail, retry_after(headers))
        if 300 <= status < 400 and (status in _REDIRECTS or headers.get("location")):
            where = headers.get("location") or "an address it does not name"
            why = f"HTTP {status}: the server redirects to {where}; redirects are not followed (they"
            return ModelError(f"{self.label}: {why} could carry the key elsewhere): set base_url to it")
        if status in (401, 403):
            key = f"the key in ${self.key_env}" if self.key_set else f"${self.key_env}: it is not set"
            return ModelError(f"{self.label}: {detail} (check {key})")
        if status == 413:  # the request's size, not the server's state: the same again fails alike
            why = "the request is larger than the server or a proxy before it accepts: take fewer steps"
            return ModelError(f"{self.label}: {detail} ({why} (limits.max_steps) or raise that limit)")
        if status == 404:
            return ModelError(f"{self.label}: {detail} ({_not_found_hint(self.url)})")
        if 300 <= status < 400:  # 304 Not Modified …: no redirect, and no answer either
            why = "not an answer to a POST: check base_url and any proxy between"
            return ModelError(f"{self.label}: {detail} ({why})")
        return ModelError(f"{self.label}: {detail}")

    def reported(self, error: object, where: str) -> Exception:
        """The error for an error object the server sent where the answer should be (a
        ``Reported``, when another try may pass)."""
        kind, message, again = error_body(error)
        why = f"the server reported {kind or 'an error'} {where}: {message}"
        if again is False:
            return ModelError(f"{self.label}: {why}")
        overloaded = "overloaded" in (kind or "")
        return Reported("overloaded" if overloaded else "server_error", why)

    def again(self, err: Reported, headers: Mapping[str, str]) -> Exception:
        """An error reported inside a 2xx answer (its body, or an event of its stream), as the
        answer's headers say: it waits their ``retry-after``, as an error status does, and an
        ``x-should-retry: false`` makes it final, as it makes a 5xx or 429 (before, the header
        was read on error statuses only: a proxy or gateway that answers 200 with an error and
        says not to retry was asked again until the retries were spent)."""
        if str(headers.get("x-should-retry", "")).strip().lower() == "false":
            why = "x-should-retry: false: the server says not to try again"
            return ModelError(f"{self.label}: {err.kind}: {err} ({why})")
        if err.retry_after is None:
            err.retry_after = retry_after(headers)
        return err

    def encoding(self, response: Any) -> ModelError | None:
        """The error for an answer compressed in a coding the client did not offer (``br``,
        ``zstd`` …: it cannot be decoded, and another attempt gets the same); None when it
        offered every compression the answer names. A name that is no compression
        (``utf-8``, ``none``: a charset or a word a misconfigured server puts there) is passed
        over, as ``httpx2`` and so the official SDKs pass it: the body is read as it is, and is
        judged as any body is."""
        said = response.headers.get("content-encoding", "")
        if not said:  # the usual answer: none named
            return None
        offered = response.request.headers.get("accept-encoding", "")
        accepted = {c.split(";")[0].strip().lower() for c in offered.split(",")}
        odd = [c for c in codings(said) if c in COMPRESSIONS and c not in accepted]
        if not odd:
            return None
        why = f"the answer is compressed with {', '.join(odd)}, which this client cannot decode"
        return ModelError(f"{self.label}: {why} (it asked for {offered or 'none'}): fix the server or proxy")

    @staticmethod
    def transport(err: BaseException, during: str) -> Retryable:
        """A failure of the HTTP exchange itself (``httpx2``'s errors): always retried."""
        import httpx2

        if isinstance(err, httpx2.TimeoutException):
            return Retryable("timeout", f"the HTTP client timed out {during}")
        if isinstance(err, httpx2.DecodingError):
            return Retryable("unusable_response", f"the body does not decode {during}: {err}")
        return Retryable("connection", f"{type(err).__name__} {during}{said_by(err)}")


def said_by(err: BaseException) -> str:
    """What a transport error says of itself, after a colon (an HTTP library's reason: "illegal
    status line", "Connection refused"), on one line, control characters dropped and at most 200
    characters; empty when it says nothing (before, only the class was named, so a trace could not
    tell a malformed answer from a reset). Only an error about the server's answer or the
    connection says it: one about tether's own request (``LocalProtocolError``: an illegal header
    value, which it quotes, credentials included) or a proxy (whose URL may hold a password) says
    nothing more than its class."""
    if type(err).__name__ not in _ABOUT_THE_ANSWER:
        return ""
    said = " ".join(_CONTROL_TEXT.sub(" ", str(err)).split())[:200]
    return f": {said}" if said else ""


# httpx2's errors (and ``h11``'s, as httpx2 names them) that describe the server's bytes or the
# connection, never the request tether wrote.
_ABOUT_THE_ANSWER = frozenset(
    {"RemoteProtocolError", "ReadError", "WriteError", "ConnectError", "CloseError"}
)


_CONTROL_TEXT = re.compile(r"[\x00-\x1f\x7f]")


class Reported(Retryable):
    """An error the server reported inside an answer with a 2xx status (its body, or an event of
    its stream), which another try may get past. Its wait is the ``retry-after`` of the answer
    it came in (``HTTPBackend._attempt`` reads it), as an error status's is: a proxy that puts a
    rate limit in a 200 says when to come back in the same header."""


def codings(header: str) -> list[str]:
    """The content codings a ``content-encoding`` header names, in order, lower case, each by
    its standard name (``x-gzip`` is ``gzip``, RFC 9110 8.4.1.3), ``identity`` and empty
    entries left out."""
    names = (c.strip().lower() for c in header.split(","))
    return [_ALIASES.get(c, c) for c in names if c not in ("", "identity")]


_ALIASES = {"x-gzip": "gzip", "x-compress": "compress"}
# The content codings that compress (IANA's HTTP Content Coding Registry, and ``zstd``): a body
# in one the client did not offer cannot be read.
COMPRESSIONS = frozenset(
    {"gzip", "deflate", "br", "zstd", "compress", "exi", "pack200-gzip", "aes128gcm", "dcb", "dcz"}
)


def unusable(why: str) -> Retryable:
    """An answer that is not the protocol's shape, or not an answer."""
    return Retryable("unusable_response", why[:300])


def _not_found_hint(url: str) -> str:
    """What a 404 asks to check. A base URL ending in the segment the protocol's path begins with
    (``…/v1`` for Anthropic's ``/v1/messages``) posts to ``/v1/v1/…``: that is the URL to fix,
    not the model name."""
    path = urlsplit(url).path.strip("/").split("/")
    twice = next((a for a, b in pairwise(path) if a and a == b), None)
    if twice is not None:
        return f"base_url repeats /{twice}: POST {url}; drop /{twice} from the end of base_url"
    return f"check the model name and base_url: POST {url}"
