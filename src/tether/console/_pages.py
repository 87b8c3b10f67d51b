"""The console's HTML pages: server-rendered, plain forms, no scripts. The principal is resolved
first, a POST's CSRF token checked before anything else, roles checked per tenant by the view
modules; another tenant's record answers 404, exactly like an unknown id.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any
from urllib.parse import quote

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from tether.console import _approvals as approvals_view
from tether.console import _elicitations as elicitations_view
from tether.console import _servers as servers_view
from tether.console._app import MAX_BODY, Console
from tether.console._resume import resume_run
from tether.console._rules import RULES
from tether.console._runs import SCANNED_RUNS, SHOWN_RUNS, RunFilter, run_filter, run_totals, timeline
from tether.console._sources import ConsoleSources
from tether.console._throttle import Throttle
from tether.console._throttle import attacker as attacker  # the round-13 tests' import
from tether.console._users import MAX_PASSWORD, AuthError, Denied, Hidden, Principal, sign_in_name
from tether.console._web import UNSTORABLE, form_value, holds_unstorable, repeated_field
from tether.errors import ApprovalError, TetherError

__all__ = ["page_routes"]

Handler = Callable[[Request, Principal], Awaitable[Response]]
Viewer = Callable[[ConsoleSources, Principal, str], Awaitable[dict[str, Any]]]

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
    """A redirect target on this site, or ``/`` (never ``//host`` or ``/\\host``, never a scheme,
    never a control character, which a browser may drop to make ``//host`` of ``/\\t/host``)."""
    if not value.startswith("/") or value.startswith(("//", "/\\")) or not value.isprintable():
        return "/"
    return value


def page_routes(console: Console) -> list[Route]:
    """Every page, in one place: each but sign-in through ``_Pages.page``."""
    ui = _Pages(console)
    proposal = ui.view(approvals_view.proposal_view, "pid", "proposal.html", "p")
    question = ui.view(elicitations_view.get, "eid", "elicitation.html", "q", problems=[], values={})
    review = ui.view(servers_view.review, "name", "server_review.html", "r")
    return [
        Route("/login", ui.login, methods=["GET", "POST"]),
        Route("/logout", ui.page(ui.logout), methods=["POST"]),
        Route("/", ui.page(ui.home)),
        Route("/approvals", ui.page(ui.approvals)),
        Route("/approvals/{pid}", ui.page(proposal)),
        Route("/approvals/{pid}/arguments", ui.page(ui.arguments)),
        Route("/approvals/{pid}/{action}", ui.page(ui.decide), methods=["POST"]),
        Route("/elicitations", ui.page(ui.questions)),
        Route("/elicitations/{eid}", ui.page(question)),
        Route("/elicitations/{eid}/answer", ui.page(ui.answer), methods=["POST"]),
        Route("/servers", ui.page(ui.servers)),
        # POST, with the CSRF token: no link, image or prefetch elsewhere can start a server.
        Route("/servers/{name}/review", ui.page(review), methods=["POST"]),
        Route("/servers/{name}/pin", ui.page(ui.pin), methods=["POST"]),
        Route("/runs", ui.page(ui.runs)),
        Route("/runs/{run_id}", ui.page(ui.run)),
        Route("/runs/{run_id}/resume", ui.page(ui.resume), methods=["POST"]),
        Route("/rules", ui.page(ui.rules)),
        Route("/audit", ui.page(ui.audit)),
    ]


class _Html(HTMLResponse):
    """A page in UTF-8, each lone surrogate in it written as its escape (``\\ud800``, as ``reveal``
    shows one): a trace's or a server's JSON may hold ``"\\ud800"``, which no UTF-8 holds, and one
    anywhere a page drew it raw (a run's agent among the runs page's filters) made the page a
    server error for every reader, each of the tenant's runs hidden with it."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, str):
            return content.encode("utf-8", "backslashreplace")
        return bytes(super().render(content))


class _Pages:
    """What every page shares: the templates, the gate, the sources, the sign-in throttle."""

    def __init__(self, console: Console) -> None:
        self.env, self.gate, self.sources = console.templates, console.gate, console.sources
        self.throttle = Throttle()

    def render(
        self, request: Request, name: str, principal: Principal | None, code: int = 200, **ctx: Any
    ) -> Response:
        notice = self.gate.notice(request, principal)
        html = self.env.get_template(name).render(
            me=principal,
            csrf=principal.csrf if principal else None,
            path=request.url.path,
            notice=NOTICES.get(notice),
            has_servers=self.sources.mcp_config is not None,
            **ctx,
        )
        response = _Html(html, status_code=code)
        if notice:
            self.gate.forget_notice(request, response)  # said once
        return response

    def done(self, request: Request, me: Principal, path: str, notice: str) -> Response:
        """The redirect after a change, to ``path``, which says ``notice`` there to ``me`` once."""
        response = RedirectResponse(quote(path, safe="/"), status_code=303)
        self.gate.flash(request, response, me, path, notice)
        return response

    def problem(
        self, request: Request, principal: Principal | None, status: int, title: str, message: str
    ) -> Response:
        return self.render(request, "error.html", principal, status, title=title, message=message)

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A page: the principal first, a POST's CSRF token next, tether's refusals as error pages."""
        gate, problem = self.gate, self.problem

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
                        return problem(request, principal, 403, "Refused", "Missing or wrong CSRF token.")
                    if holds_unstorable(form):
                        return problem(request, principal, 400, "Refused", UNSTORABLE)
                    if (twice := repeated_field(form)) is not None:
                        said = f"The field {twice!r} is given twice."
                        return problem(request, principal, 400, "Refused", said)
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

    def view(self, load: Viewer, param: str, template: str, as_name: str, **extra: Any) -> Handler:
        """A page showing the record ``load(sources, principal, id)`` as ``as_name``."""

        async def show(request: Request, me: Principal) -> Response:
            found = await load(self.sources, me, request.path_params[param])
            return self.render(request, template, me, 200, **{as_name: found}, **extra)

        return show

    async def login(self, request: Request) -> Response:
        nxt = local_path(request.query_params.get("next", "/"))
        error = ""
        status = 200
        if request.method == "POST":
            form = await request.form()
            nxt = local_path(form_value(form, "next", 500))
            name = sign_in_name(form_value(form, "username", 64))
            # A browser that signed in as this name before is counted as itself, not as an address
            # it may share with guessers (their failures there would lock its person out).
            client = self.gate.device(request, name) or (request.client.host if request.client else "")
            if not self.gate.login_ok(request, form_value(form, "csrf_login")):
                error, status = "The sign-in form expired or came from elsewhere; try again.", 403
            elif holds_unstorable(form):
                error, status, nxt = UNSTORABLE, 400, "/"
            elif repeated_field(form) is not None:
                error, status, nxt = "A field of the sign-in form is given twice.", 400, "/"
            elif (at := self.throttle.attempt(name, client)) is None:
                if self.throttle.first_refusal(client):
                    self.sources.users.audit(f"session:{name}", "login", outcome="refused:throttled")
                error, status = "Too many failed sign-in attempts; try again later.", 429
            else:
                try:
                    credential = await anyio.to_thread.run_sync(
                        self.sources.users.check_password,
                        name,
                        form_value(form, "password", MAX_PASSWORD),
                        limiter=self.gate.hashing,
                    )
                    done = RedirectResponse(nxt, status_code=303)
                    self.gate.start_session(request, done, name, credential)
                except AuthError as err:
                    self.sources.users.audit(f"session:{name}", "login", outcome=f"refused:{err.reason}")
                    error, status = "Wrong user name or password.", 401
                else:
                    self.throttle.succeeded(name, client, at)
                    self.sources.users.audit(f"session:{name}", "login")
                    self.gate.mark_device(request, done, name)
                    return done
        token = secrets.token_urlsafe(24)
        response = self.render(
            request,
            "login.html",
            None,
            status,
            error=error,
            next=nxt,
            csrf_login=token,
            no_users=not self.sources.users.has_users(),
        )
        self.gate.set_login_cookie(request, response, token)
        return response

    async def logout(self, request: Request, me: Principal) -> Response:
        response = RedirectResponse("/login", status_code=303)
        self.sources.users.audit(me.actor, "logout")
        self.gate.end_session(request, response, me)
        return response

    async def home(self, request: Request, me: Principal) -> Response:
        return RedirectResponse("/approvals", status_code=303)

    async def arguments(self, request: Request, me: Principal) -> Response:
        """A proposal's arguments whole, as its page shows them to this person (declared secrets
        not shown), as plain JSON text of ASCII alone: every other character an escape
        (``\\u202e``, ``\\u0430``, ``\\n``), so nothing in a value is cut, hidden, reordered or read
        as another letter (its page shows a long value's start only, flagged ``cut``)."""
        found = await approvals_view.proposal_view(self.sources, me, request.path_params["pid"])
        whole = {
            a["name"]: f"[secret, {a['chars']} characters, not shown]" if a["secret"] else a["value"]
            for a in found["arguments"]
        }
        text = await anyio.to_thread.run_sync(_ascii_json, whole)
        return PlainTextResponse(text)

    async def approvals(self, request: Request, me: Principal) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in ("pending", "approved", "denied", "invalidated", "all"):
            status = "pending"
        tenant = request.query_params.get("tenant", "")
        rows = await approvals_view.queue(self.sources, me, status=status, tenant=tenant)
        return self.render(
            request,
            "approvals.html",
            me,
            rows=rows,
            status=status,
            tenant=tenant,
            tenants=await approvals_view.queue_tenants(self.sources, me),
            shown=approvals_view.QUEUE_SHOWN,
        )

    async def decide(self, request: Request, me: Principal) -> Response:
        form = await request.form()
        pid = request.path_params["pid"]
        done = await approvals_view.review_proposal(
            self.sources,
            me,
            pid,
            request.path_params["action"],
            reason=form_value(form, "reason", MAX_BODY),  # whole: one too long is refused, never cut
            content_hash=form_value(form, "content_hash", 100) or None,
            read={k: form_value(form, k, MAX_BODY) for k in ("effect", "tenant") if k in form},  # whole
        )
        return self.done(request, me, f"/approvals/{done.id}", str(done.status))

    async def questions(self, request: Request, me: Principal) -> Response:
        pending = await elicitations_view.pending(self.sources, me)
        urls = await elicitations_view.url_requests(self.sources, me)
        shown = elicitations_view.PENDING_SHOWN
        return self.render(request, "elicitations.html", me, pending=pending, urls=urls, shown=shown)

    async def answer(self, request: Request, me: Principal) -> Response:
        eid = request.path_params["eid"]
        form = await request.form()
        action = form_value(form, "action", 20)
        content = None
        if action == "accept":
            view = await elicitations_view.get(self.sources, me, eid)
            values: dict[str, str | list[str]] = {}
            for key in {k for k in form if k.startswith("f:")}:
                # Whole, as the API takes them (the body is bounded): cut, a value over a limit
                # was answered as its start, the schema's own ``maxLength`` never seeing the rest.
                given = [v for v in form.getlist(key) if isinstance(v, str)]
                values[key[2:]] = given if len(given) != 1 else given[0]
            content, problems = elicitations_view.parse_form(view["schema"], values)
            if problems:
                return self.render(
                    request, "elicitation.html", me, 400, q=view, problems=problems, values=values
                )
        await elicitations_view.answer(self.sources, me, eid, action, content)
        return self.done(request, me, "/elicitations", "answered")

    async def servers(self, request: Request, me: Principal) -> Response:
        tenant = self.sources.mcp_config.host.tenant if self.sources.mcp_config else ""
        return self.render(
            request,
            "servers.html",
            me,
            servers=await servers_view.servers(self.sources, me),
            is_admin=bool(tenant) and me.may(tenant, "admin"),
            tenant=tenant,
        )

    async def pin(self, request: Request, me: Principal) -> Response:
        form = await request.form()
        name = request.path_params["name"]
        tools = {str(v) for v in form.getlist("tool") if isinstance(v, str)}
        flagged = {str(v) for v in form.getlist("accept_flagged") if isinstance(v, str)}
        digest = form_value(form, "digest", 100)
        result = await servers_view.pin(
            self.sources, me, name, digest=digest, tools=tools, accept_flagged=flagged
        )
        return self.render(request, "pinned.html", me, result=result)

    async def runs(self, request: Request, me: Principal) -> Response:
        flt = run_filter(request.query_params)
        mine = RunFilter(visible=me.tenants("viewer"))  # before the list is cut
        visible = await self.sources.runs(mine, limit=SCANNED_RUNS)  # the filters' choices too
        # Filtered, the hidden dropped, then cut: checkpoints read for the rows shown (and hidden).
        rows = await self.sources.seen_runs(me, [r for r in visible if flt.matches(r)], SHOWN_RUNS)
        seen = self.sources.seen_values  # the choices: of the runs the reader sees, like the rows
        return self.render(
            request,
            "runs.html",
            me,
            rows=rows,
            flt=flt,
            tenants=await seen(me, visible, lambda r: r.tenant or ""),
            reasons=await seen(me, visible, lambda r: r.stop_reason),
            agents=await seen(me, visible, lambda r: r.agent),
        )

    async def run(self, request: Request, me: Principal) -> Response:
        run_id = request.path_params["run_id"]
        summary, view = await self.sources.run(me, run_id)
        items, totals = await anyio.to_thread.run_sync(
            lambda: (timeline(view.events), run_totals(view.events))
        )
        checkpoint, tenant = await self.sources.checkpoint(run_id)
        if checkpoint is not None and tenant != summary.tenant:
            checkpoint = None  # another tenant's run under this id: its checkpoint is not this run's
        # What tether resume would continue (resume_point): paused or stopped, never ended.
        resumable = (
            self.sources.resume is not None
            and checkpoint is not None
            and checkpoint.status in ("paused", "stopped")
            and bool(checkpoint.app)
            and me.may(summary.tenant or "", "reviewer")
        )
        return self.render(
            request,
            "run.html",
            me,
            run=summary,
            items=items,
            totals=totals,
            checkpoint=checkpoint,
            resumable=resumable,
            cut=view.notice(),
        )

    async def resume(self, request: Request, me: Principal) -> Response:
        run_id = request.path_params["run_id"]
        summary = await resume_run(self.sources, me, run_id)
        done = "resume_enqueued" if summary.get("enqueued") else "resumed"
        return self.done(request, me, f"/runs/{run_id}", done)

    async def rules(self, request: Request, me: Principal) -> Response:
        return self.render(request, "rules.html", me, rules=RULES)

    async def audit(self, request: Request, me: Principal) -> Response:
        tenants = me.tenants("admin")
        if tenants is not None and not tenants:
            raise Denied("not_admin", "the audit log is for admins")
        return self.render(request, "audit.html", me, entries=self.sources.users.audit_log(tenants=tenants))


def _ascii_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True, default=str) + "\n"
