"""``create_app``: the console as a Starlette application (HTML pages and a JSON API, same rules)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.console.render import environment
from tether.console.sources import ConsoleSources
from tether.console.web import Gate

__all__ = ["Console", "create_app"]

MAX_BODY = 256 * 1024

_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]  # fmt: skip


@dataclass
class Console:
    """What every handler needs: the stores, the gate and the templates."""

    sources: ConsoleSources
    gate: Gate
    templates: Environment


class Guard:
    """Every response gets the same protective headers (no framing, no sniffing, a strict CSP);
    a request body over ``MAX_BODY`` bytes is refused with 413 before a handler reads it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *[(k, v) for k, v in _HEADERS if k not in names],
                ]
            await send(message)

        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > MAX_BODY:
            await PlainTextResponse("request body too large", status_code=413)(scope, receive, wrapped)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > MAX_BODY:
                raise ValueError("request body larger than declared")
            return message

        await self.app(scope, limited, wrapped)


def create_app(
    sources: ConsoleSources,
    *,
    secret_key: bytes,
    secure_cookies: bool = False,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> Any:
    """The console's ASGI application over ``sources``."""
    from contextlib import asynccontextmanager

    from tether.console.api import api_routes
    from tether.console.pages import page_routes

    console = Console(sources, Gate(sources.users, secret_key, secure_cookies), environment())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        if on_shutdown is not None:
            await on_shutdown()
        sources.close()

    static = StaticFiles(directory=str(Path(__file__).with_name("static")))
    app = Starlette(
        routes=[*page_routes(console), *api_routes(console), Mount("/static", static, name="static")],
        lifespan=lifespan,
    )
    app.state.console = console
    return Guard(app)
