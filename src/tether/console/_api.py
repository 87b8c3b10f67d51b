"""The JSON API behind the pages: the same view modules, the same rules. Authenticate with
``Authorization: Bearer <token>``, or the session cookie plus ``X-CSRF-Token`` for state changes.
Errors are ``{"error": reason, "message": text}``: 401, 403 (role, CSRF), 404 (unknown or another
tenant's), 409 (already decided, content changed), 400.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import wraps
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tether.console import _approvals as approvals_view
from tether.console import _elicitations as elicitations_view
from tether.console import _servers as servers_view
from tether.console._app import MAX_BODY, Console
from tether.console._resume import resume_run
from tether.console._runs import (
    SCANNED_RUNS,
    SHOWN_RUNS,
    RunSummary,
    RunView,
    nests_deeper,
    run_filter,
    run_totals,
    timeline,
)
from tether.console._sources import ConsoleSources
from tether.console._users import AuthError, Denied, Hidden, Principal
from tether.console._web import UNSTORABLE, Gate, holds_unstorable, read_json
from tether.errors import ApprovalError, TetherError

__all__ = ["api_routes"]

Handler = Callable[[ConsoleSources, Request, Principal, dict[str, Any]], Awaitable[Any]]
# Levels of arrays and objects a body may nest (an answer, a pin: a few): the parser takes about a
# thousand, and a handler that walked one a few hundred deep (validating an answer) failed, a
# server error, unaudited.
MAX_BODY_DEPTH = 32


class _Json(JSONResponse):
    """JSON with every non-ASCII character escaped: read raw, no hidden character is invisible."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        except ValueError:  # NaN or an infinity, which JSON cannot write (a trace may hold one)
            text = json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        return text.encode("ascii")


def _finite(value: Any) -> Any:
    """``value`` with each NaN or infinity as its name (a trace may keep a server's ``NaN``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _error(status: int, reason: str, message: str) -> JSONResponse:
    return _Json({"error": reason, "message": message}, status_code=status)


def api_routes(console: Console) -> list[Route]:
    return [Route(path, _api(console.gate, console.sources, h), methods=m) for path, h, m in _ROUTES]


def _api(gate: Gate, sources: ConsoleSources, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An API endpoint: the principal resolved first, the CSRF header of a POST checked before
    the body is read, the body a JSON object (no NUL in it, nested at most ``MAX_BODY_DEPTH``
    levels), and tether's refusals as JSON errors."""

    @wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            principal = await gate.principal(request)
        except AuthError as err:
            return _error(401, err.reason, str(err))
        if principal is None:
            return _error(401, "unauthenticated", "sign in or send Authorization: Bearer <token>")
        body: dict[str, Any] = {}
        if request.method == "POST":
            if not gate.csrf_ok(request, principal, None):
                return _error(403, "csrf", "missing or wrong X-CSRF-Token header")
            raw = await request.body()
            if raw.strip():
                try:
                    parsed = read_json(raw)
                except (ValueError, RecursionError) as err:  # not strict JSON, or nested too deep
                    plain = isinstance(err, RecursionError | json.JSONDecodeError | UnicodeDecodeError)
                    why = "" if plain else f": {str(err)[:200]}"
                    return _error(400, "bad_json", f"the body must be a JSON object in UTF-8{why}")
                if not isinstance(parsed, dict):
                    return _error(400, "bad_json", "the body must be a JSON object")
                if nests_deeper(parsed, MAX_BODY_DEPTH):  # what reads it may recurse (a server error)
                    return _error(400, "bad_json", f"the body nests deeper than {MAX_BODY_DEPTH} levels")
                if holds_unstorable(parsed):
                    return _error(400, "bad_request", UNSTORABLE)
                body = parsed
        try:
            content = await handler(sources, request, principal, body)
            return await anyio.to_thread.run_sync(_Json, content)  # a run's every event: long
        except Hidden as err:
            return _error(404, "not_found", str(err))
        except Denied as err:
            return _error(403, err.reason, str(err))
        except ApprovalError as err:
            bad = err.reason in ("invalid_answer", "bad_action", "reason_required", "bad_request")
            return _error(400 if bad else 409, err.reason, str(err))
        except TetherError as err:
            return _error(400, type(err).__name__, str(err))

    return endpoint


def _text(body: dict[str, Any], key: str, limit: int = 2000) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise ApprovalError("bad_request", f"{key} must be a string")
    return value[:limit]


async def _me(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    return {"name": p.name, "via": p.via, "grants": dict(p.grants), "csrf_token": p.csrf}


async def _list_approvals(
    sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]
) -> Any:
    status = request.query_params.get("status", "pending")
    if status not in ("pending", "approved", "denied", "invalidated", "all"):
        raise ApprovalError("bad_request", "status: pending|approved|denied|invalidated|all")
    tenant = request.query_params.get("tenant", "")
    rows = await approvals_view.queue(sources, p, status=status, tenant=tenant)
    return {"count": len(rows), "limit": approvals_view.QUEUE_SHOWN, "proposals": rows}


async def _get_approval(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    return await approvals_view.proposal_view(sources, p, request.path_params["pid"])


async def _decide(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    done = await approvals_view.review_proposal(
        sources,
        p,
        request.path_params["pid"],
        request.path_params["action"],
        reason=_text(body, "reason", MAX_BODY),  # whole: one too long is refused, never cut
        content_hash=_text(body, "content_hash", 100) or None,
        read={k: _text(body, k, MAX_BODY) for k in ("effect", "tenant") if k in body},  # whole
    )
    return done.to_json()


async def _list_questions(
    sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]
) -> Any:
    rows = await elicitations_view.pending(sources, p)
    for row in rows:
        row.pop("fields", None)
    return {
        "count": len(rows),
        "limit": elicitations_view.PENDING_SHOWN,
        "pending": rows,
        "url_requests": await elicitations_view.url_requests(sources, p),
    }


async def _answer(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    action = _text(body, "action", 20)
    content = body.get("content")
    if content is not None and not isinstance(content, dict):
        raise ApprovalError("invalid_answer", "content must be a JSON object")
    return await elicitations_view.answer(sources, p, request.path_params["eid"], action, content)


async def _list_servers(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    return {"servers": await servers_view.servers(sources, p)}


async def _review(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    view = await servers_view.review(sources, p, request.path_params["name"])
    for tool in view["tools"]:
        tool["diff"] = [line for _, line in tool["diff"]]
    return view


async def _pin(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    tools, flagged = body.get("tools", []), body.get("accept_flagged", [])
    if not (isinstance(tools, list) and isinstance(flagged, list)):
        raise ApprovalError("bad_request", "tools and accept_flagged are lists of names")
    return await servers_view.pin(
        sources,
        p,
        request.path_params["name"],
        digest=_text(body, "digest", 100),
        tools={str(t) for t in tools},
        accept_flagged={str(t) for t in flagged},
    )


async def _list_runs(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    flt = replace(run_filter(request.query_params), visible=p.tenants("viewer"))
    # The hidden dropped, then cut (``seen_runs``): never fewer than the reader's own newest.
    runs = [r for r in await sources.runs(flt, limit=SCANNED_RUNS) if p.sees(r.tenant)]
    seen = await sources.seen_runs(p, runs, SHOWN_RUNS)
    rows = [r.to_json() for r in seen]
    return {"count": len(rows), "runs": rows}


async def _get_run(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    run, view = await sources.run(p, request.path_params["run_id"])
    return await anyio.to_thread.run_sync(_run_json, run, view)


def _run_json(run: RunSummary, view: RunView) -> dict[str, Any]:
    """The run, its totals and timeline over what was read; ``cut`` (only when the trace was not
    read whole) says what was left: the totals then cover the events shown."""
    items = [i.to_json() for i in timeline(view.events)]
    out = {**run.to_json(), "totals": run_totals(view.events), "timeline": items}
    notice = view.notice()
    return out if notice is None else {**out, "cut": notice}


async def _resume(sources: ConsoleSources, request: Request, p: Principal, body: dict[str, Any]) -> Any:
    return await resume_run(sources, p, request.path_params["run_id"])


# Every endpoint of the API, in one place: (path, handler, methods).
_ROUTES: list[tuple[str, Handler, list[str]]] = [
    ("/api/me", _me, ["GET"]),
    ("/api/approvals", _list_approvals, ["GET"]),
    ("/api/approvals/{pid}", _get_approval, ["GET"]),
    ("/api/approvals/{pid}/{action}", _decide, ["POST"]),
    ("/api/elicitations", _list_questions, ["GET"]),
    ("/api/elicitations/{eid}/answer", _answer, ["POST"]),
    ("/api/servers", _list_servers, ["GET"]),
    ("/api/servers/{name}/review", _review, ["POST"]),
    ("/api/servers/{name}/pin", _pin, ["POST"]),
    ("/api/runs", _list_runs, ["GET"]),
    ("/api/runs/{run_id}", _get_run, ["GET"]),
    ("/api/runs/{run_id}/resume", _resume, ["POST"]),
]
