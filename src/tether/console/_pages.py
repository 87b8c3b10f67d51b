"""The console's HTML pages: server-rendered, plain forms, no scripts.

Every handler resolves the principal first (no principal: the sign-in page), checks the role
per tenant through the view modules, and every POST checks the CSRF token before anything else.
Another tenant's record answers 404, exactly like an unknown id.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from tether.console import _approvals as approvals_view
from tether.console import _elicitations as elicitations_view
from tether.console import _servers as servers_view
from tether.console._app import Console
from tether.console._approvals import Denied, Hidden
from tether.console._rules import RULES
from tether.console._runs import RunFilter, parse_day, run_totals, timeline
from tether.console._users import AuthError, Principal
from tether.console._web import form_value
from tether.errors import ApprovalError, TetherError

__all__ = ["page_routes"]

Handler = Callable[[Request, Principal], Awaitable[Response]]
SHOWN_EVENTS = 2000  # of one run's timeline on its page (the API gives every event)

NOTICES = {
    "approved": "Approved. The paused run continues when it is resumed.",
    "denied": "Denied. The run ends approval_denied when it is resumed.",
    "invalidated": "Invalidated: it can never run (again).",
    "answered": "Answer stored. The paused run continues when it is resumed.",
    "pinned": "Pinned.",
    "resumed": "The run was resumed.",
    "resume_enqueued": "The run's continuation is queued: a worker of the deployment resumes it.",
}


def local_path(value: str) -> str:
    """A redirect target on this site, or ``/`` (never ``//host`` or ``/\\host``, never a scheme)."""
    if not value.startswith("/") or value.startswith(("//", "/\\")) or any(c in value for c in "\r\n\t"):
        return "/"
    return value


class Throttle:
    """Failed sign-ins, counted per (user name, client address), per client address and per
    user name, within ``window_s``. Attempts are refused for the window after ``per_pair``
    failures for one name from one address, ``per_client`` failures from one address whatever
    the names (unknown names count the same), or ``per_name`` failures for one name from
    anywhere. Someone guessing from elsewhere therefore never locks a person out at their own
    address with a handful of failures; only a guessing campaign from many addresses reaches
    the per-name limit."""

    def __init__(
        self, per_pair: int = 5, per_client: int = 20, per_name: int = 100, window_s: float = 900.0
    ) -> None:
        self.limits = {"pair": per_pair, "client": per_client, "name": per_name}
        self.window_s = window_s
        self._failures: dict[tuple[str, str], list[float]] = {}

    def _keys(self, name: str, client: str) -> list[tuple[str, str]]:
        return [("pair", f"{name}\x00{client}"), ("client", client), ("name", name)]

    def _recent(self, key: tuple[str, str]) -> list[float]:
        now = time.monotonic()
        recent = [t for t in self._failures.get(key, []) if now - t < self.window_s]
        if recent:
            self._failures[key] = recent
        else:
            self._failures.pop(key, None)
        return recent

    def blocked(self, name: str, client: str) -> bool:
        return any(len(self._recent(k)) >= self.limits[k[0]] for k in self._keys(name, client))

    def failed(self, name: str, client: str) -> None:
        if len(self._failures) > 50_000:  # bounded memory: drop what has expired
            for key in list(self._failures):
                self._recent(key)
        now = time.monotonic()
        for key in self._keys(name, client):
            self._failures.setdefault(key, []).append(now)

    def succeeded(self, name: str, client: str) -> None:
        self._failures.pop(("pair", f"{name}\x00{client}"), None)


def page_routes(console: Console) -> list[Route]:
    ui = _Pages(console)
    return [
        *_session_routes(ui),
        *_approval_routes(ui),
        *_elicitation_routes(ui),
        *_server_routes(ui),
        *_run_routes(ui),
        *_admin_routes(ui),
    ]


class _Pages:
    """What every page shares: the templates, the gate, the sources, the sign-in throttle."""

    def __init__(self, console: Console) -> None:
        self.env, self.gate, self.sources = console.templates, console.gate, console.sources
        self.throttle = Throttle()

    def render(
        self, request: Request, name: str, principal: Principal | None, code: int = 200, **ctx: Any
    ) -> Response:
        html = self.env.get_template(name).render(
            me=principal,
            csrf=principal.csrf if principal else None,
            path=request.url.path,
            notice=NOTICES.get(request.query_params.get("done", "")),
            has_servers=self.sources.mcp_config is not None,
            **ctx,
        )
        return HTMLResponse(html, status_code=code)

    def problem(
        self, request: Request, principal: Principal | None, status: int, title: str, message: str
    ) -> Response:
        return self.render(request, "error.html", principal, status, title=title, message=message)

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A page: the principal resolved first (none: the sign-in page), the CSRF token of a POST
        checked before anything else, and tether's refusals shown as error pages."""
        gate, sources, problem = self.gate, self.sources, self.problem

        @wraps(handler)
        async def endpoint(request: Request) -> Response:
            try:
                principal = await gate.principal(request)
            except AuthError:
                return problem(request, None, 401, "Not signed in", "The API token was refused.")
            if principal is None:
                target = quote(request.url.path, safe="/")
                return RedirectResponse(f"/login?next={target}", status_code=303)
            try:
                if request.method == "POST":
                    form = await request.form()
                    if not gate.csrf_ok(request, principal, form_value(form, "csrf_token")):
                        sources.users.audit(
                            f"{principal.via}:{principal.name}", "csrf_refused", target=request.url.path,
                            outcome="refused:csrf",
                        )  # fmt: skip
                        return problem(request, principal, 403, "Refused", "Missing or wrong CSRF token.")
                return await handler(request, principal)
            except Hidden:
                return problem(request, principal, 404, "Not found", "There is nothing here for you.")
            except Denied as err:
                return problem(request, principal, 403, "Not allowed", str(err))
            except ApprovalError as err:
                return problem(request, principal, 409, "Refused", f"{err.reason}: {err}")
            except TetherError as err:
                return problem(request, principal, 400, "Refused", str(err))

        return endpoint


def _session_routes(ui: _Pages) -> list[Route]:
    """Sign in (throttled, CSRF-checked) and out."""
    render, page, gate, sources, throttle = ui.render, ui.page, ui.gate, ui.sources, ui.throttle

    async def login(request: Request) -> Response:
        nxt = local_path(request.query_params.get("next", "/"))
        error = ""
        status = 200
        if request.method == "POST":
            form = await request.form()
            nxt = local_path(form_value(form, "next", 500))
            name = form_value(form, "username", 64).strip().lower()
            client = request.client.host if request.client else ""
            if not gate.login_ok(request, form_value(form, "csrf_login")):
                error, status = "The sign-in form expired or came from elsewhere; try again.", 403
            elif throttle.blocked(name, client):
                sources.users.audit(f"session:{name}", "login", outcome="refused:throttled")
                error, status = "Too many failed sign-in attempts; try again later.", 429
            else:
                import anyio

                try:
                    await anyio.to_thread.run_sync(
                        sources.users.authenticate, name, form_value(form, "password", 1024)
                    )
                except AuthError:
                    throttle.failed(name, client)
                    sources.users.audit(f"session:{name}", "login", outcome="refused:bad_credentials")
                    error, status = "Wrong user name or password.", 401
                else:
                    throttle.succeeded(name, client)
                    sources.users.audit(f"session:{name}", "login")
                    done = RedirectResponse(nxt, status_code=303)
                    gate.start_session(done, name)
                    return done
        token = gate.new_login_token()
        response = render(
            request, "login.html", None, status, error=error, next=nxt, csrf_login=token,
            no_users=not sources.users.has_users(),
        )  # fmt: skip
        gate.set_login_cookie(response, token)
        return response

    @page
    async def logout(request: Request, me: Principal) -> Response:
        response = RedirectResponse("/login", status_code=303)
        sources.users.audit(f"{me.via}:{me.name}", "logout")
        gate.end_session(response, me)
        return response

    return [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]


def _approval_routes(ui: _Pages) -> list[Route]:
    """The approval queue, one proposal, a decision."""
    render, page, sources = ui.render, ui.page, ui.sources

    def visible_tenants(me: Principal, tenants: set[str]) -> list[str]:
        return sorted(t for t in tenants if me.sees(t))

    @page
    async def home(request: Request, me: Principal) -> Response:
        return RedirectResponse("/approvals", status_code=303)

    @page
    async def approvals(request: Request, me: Principal) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in ("pending", "approved", "denied", "invalidated", "all"):
            status = "pending"
        tenant = request.query_params.get("tenant", "")
        rows = await approvals_view.queue(sources, me, status=status, tenant=tenant)
        everyone = await approvals_view.queue(sources, me, status="all")
        return render(
            request, "approvals.html", me, rows=rows, status=status, tenant=tenant,
            tenants=visible_tenants(me, {r["tenant"] for r in everyone}),
        )  # fmt: skip

    @page
    async def proposal(request: Request, me: Principal) -> Response:
        view = await approvals_view.proposal_view(sources, me, request.path_params["pid"])
        return render(request, "proposal.html", me, p=view)

    @page
    async def decide(request: Request, me: Principal) -> Response:
        form = await request.form()
        pid = request.path_params["pid"]
        done = await approvals_view.decide(
            sources,
            me,
            pid,
            request.path_params["action"],
            reason=form_value(form, "reason", 2000),
            content_hash=form_value(form, "content_hash", 100) or None,
        )
        return RedirectResponse(f"/approvals/{quote(done.proposal_id)}?done={done.status}", status_code=303)

    return [
        Route("/", home),
        Route("/approvals", approvals),
        Route("/approvals/{pid}", proposal),
        Route("/approvals/{pid}/{action}", decide, methods=["POST"]),
    ]


def _elicitation_routes(ui: _Pages) -> list[Route]:
    """Servers' questions waiting for a person, and the answers."""
    render, page, sources = ui.render, ui.page, ui.sources

    @page
    async def questions(request: Request, me: Principal) -> Response:
        pending = await elicitations_view.pending(sources, me)
        urls = elicitations_view.url_requests(sources, me)
        return render(request, "elicitations.html", me, pending=pending, urls=urls)

    @page
    async def question(request: Request, me: Principal) -> Response:
        view = await elicitations_view.get(sources, me, request.path_params["eid"])
        return render(request, "elicitation.html", me, q=view, problems=[], values={})

    @page
    async def answer(request: Request, me: Principal) -> Response:
        eid = request.path_params["eid"]
        form = await request.form()
        action = form_value(form, "action", 20)
        content = None
        if action == "accept":
            view = await elicitations_view.get(sources, me, eid)
            fields = {k: form_value(form, k) for k in form if k.startswith("f:")}
            values = {k[2:]: v for k, v in fields.items()}
            content, problems = elicitations_view.parse_form(view["schema"], values)
            if problems:
                return render(request, "elicitation.html", me, 400, q=view, problems=problems, values=values)
        await elicitations_view.answer(sources, me, eid, action, content)
        return RedirectResponse("/elicitations?done=answered", status_code=303)

    return [
        Route("/elicitations", questions),
        Route("/elicitations/{eid}", question),
        Route("/elicitations/{eid}/answer", answer, methods=["POST"]),
    ]


def _server_routes(ui: _Pages) -> list[Route]:
    """MCP servers: their review and the pinning of their tools."""
    render, page, sources = ui.render, ui.page, ui.sources

    @page
    async def servers(request: Request, me: Principal) -> Response:
        tenant = sources.mcp_config.host.tenant if sources.mcp_config else ""
        return render(
            request, "servers.html", me, servers=servers_view.servers(sources, me),
            is_admin=bool(tenant) and me.may(tenant, "admin"), tenant=tenant,
        )  # fmt: skip

    @page
    async def review(request: Request, me: Principal) -> Response:
        view = await servers_view.review(sources, me, request.path_params["name"])
        return render(request, "server_review.html", me, r=view)

    @page
    async def pin(request: Request, me: Principal) -> Response:
        form = await request.form()
        name = request.path_params["name"]
        tools = {str(v) for v in form.getlist("tool") if isinstance(v, str)}
        flagged = {str(v) for v in form.getlist("accept_flagged") if isinstance(v, str)}
        result = await servers_view.pin(
            sources, me, name, digest=form_value(form, "digest", 100), tools=tools, accept_flagged=flagged
        )
        return render(request, "pinned.html", me, result=result)

    return [
        Route("/servers", servers),
        # POST with the CSRF token: a review launches or contacts the server, so no link, image
        # or prefetch on another page can start it.
        Route("/servers/{name}/review", review, methods=["POST"]),
        Route("/servers/{name}/pin", pin, methods=["POST"]),
    ]


def _run_routes(ui: _Pages) -> list[Route]:
    """Runs: the list, one run, resuming a paused one."""
    render, page, sources = ui.render, ui.page, ui.sources

    @page
    async def runs(request: Request, me: Principal) -> Response:
        q = request.query_params
        flt = RunFilter(
            tenant=q.get("tenant", ""), stop_reason=q.get("stop_reason", ""), agent=q.get("agent", "")[:100],
            since=parse_day(q.get("since", "")), until=parse_day(q.get("until", "")),
        )  # fmt: skip
        everything = [r for r in sources.traces.runs()] if sources.traces else []
        visible = [r for r in everything if me.sees(r.tenant)]
        rows = [r for r in visible if flt.matches(r)]
        return render(
            request, "runs.html", me, rows=rows, flt=flt,
            tenants=sorted({r.tenant for r in visible if r.tenant}),
            reasons=sorted({r.stop_reason for r in visible if r.stop_reason}),
            agents=sorted({r.agent for r in visible if r.agent}),
        )  # fmt: skip

    def _run(me: Principal, run_id: str) -> Any:
        run = sources.traces.get(run_id) if sources.traces else None
        if run is None or not me.sees(run.tenant):
            raise Hidden("run")
        return run

    @page
    async def run(request: Request, me: Principal) -> Response:
        run_id = request.path_params["run_id"]
        summary = _run(me, run_id)
        assert sources.traces is not None
        events = sources.traces.events(run_id)
        checkpoint = await sources.approvals.store.load_checkpoint(run_id) if sources.approvals else None
        # What tether resume would continue (runscope.resume_point): paused, or stopped on a
        # transient failure; never a run that ended.
        resumable = (
            sources.resume is not None and checkpoint is not None
            and checkpoint.status in ("paused", "stopped") and bool(checkpoint.app)
            and me.may(summary.tenant or "", "reviewer")
        )  # fmt: skip
        return render(
            request, "run.html", me, run=summary, items=timeline(events), totals=run_totals(events),
            checkpoint=checkpoint, resumable=resumable, result=None, shown_events=SHOWN_EVENTS,
        )  # fmt: skip

    @page
    async def resume(request: Request, me: Principal) -> Response:
        from tether.console._resume import resume_run

        run_id = request.path_params["run_id"]
        summary = await resume_run(sources, me, run_id)
        done = "resume_enqueued" if summary.get("enqueued") else "resumed"
        return RedirectResponse(f"/runs/{quote(run_id)}?done={done}", status_code=303)

    return [
        Route("/runs", runs),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/resume", resume, methods=["POST"]),
    ]


def _admin_routes(ui: _Pages) -> list[Route]:
    """The rules in force and the audit log."""
    render, page, sources = ui.render, ui.page, ui.sources

    @page
    async def rules(request: Request, me: Principal) -> Response:
        return render(request, "rules.html", me, rules=RULES)

    @page
    async def audit(request: Request, me: Principal) -> Response:
        tenants = me.tenants("admin")
        if tenants is not None and not tenants:
            raise Denied("not_admin", "the audit log is for admins")
        return render(request, "audit.html", me, entries=sources.users.audit_log(tenants=tenants))

    return [
        Route("/rules", rules),
        Route("/audit", audit),
    ]
