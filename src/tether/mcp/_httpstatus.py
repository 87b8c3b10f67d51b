"""What an HTTP error status to a request says, for the model and the person: the SDK says only
"Server returned an error response" for any status it has no JSON-RPC error for, so a 401 or 403
(``refusal``) and a 429 or 5xx answered with a page or text, as proxies, gateways and rate
limiters answer (``status_failure``), are named here by their status."""

from __future__ import annotations

import re

import httpx2

__all__ = ["refusal", "status_failure"]

_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9._~+-]{0,30})(?=\s|,|$)")
_SECONDS = re.compile(r"\s*([0-9]{1,7})\s*")  # a Retry-After in seconds (its date form is not shown)


def refusal(response: httpx2.Response) -> str:
    """A 401 or 403, for the model and the person: what the server wants (its scheme's name only:
    the rest of its header is the server's own text)."""
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    challenge = response.headers.get("www-authenticate", "")
    scheme = m.group(1) if (m := _SCHEME.match(challenge)) else None
    if response.status_code == 403:
        return f"{status}: the server refused the host's credentials for this request"
    wants = f"authorization ({scheme})" if scheme else "authorization"
    oauth = " and names OAuth metadata" if "resource_metadata" in challenge else ""
    return (
        f"{status}: the server wants {wants}{oauth}; the host runs no OAuth flow: give the "
        "server's token in its configured headers"
    )


def status_failure(response: httpx2.Response, content_type: str) -> str | None:
    """A 429 or 5xx whose body is no JSON (a JSON-RPC error in one is the server's own answer,
    left to the SDK), named by its status and, for a 429 or 503, the seconds it asks to wait;
    ``None`` for any other answer. The page itself is never read: it is no one's to see."""
    code = response.status_code
    if not (code == 429 or 500 <= code <= 599) or content_type.startswith("application/json"):
        return None
    known = {429: "rate limited", 502: "a bad gateway", 503: "unavailable", 504: "a gateway timeout"}
    status = f"HTTP {code} {response.reason_phrase}".strip()
    said = f"the server answered {status}" + (f" ({known[code]})" if code in known else "")
    wait = _SECONDS.fullmatch(response.headers.get("retry-after", "")) if code in (429, 503) else None
    return said + (f", asking to be retried after {int(wait.group(1))}s" if wait else "")
