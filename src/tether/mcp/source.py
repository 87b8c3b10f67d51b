"""An MCP server as a tool source, through the official ``mcp`` SDK (stdio or Streamable HTTP).

Connecting a server creates no trust (X2):

- tool names are namespaced with the id the host assigns (``<server>__<tool>``);
- effects come from the host's declaration (an undeclared tool is side-effecting, so the
  policy asks for approval); server annotations are recorded as untrusted hints only;
- with a pin store, only tools whose canonical definition matches an approved pin are
  offered, and the model sees the pinned definition; every listing the SDK makes
  (start, re-check before a call, list-changed, cache refresh, its own silent re-list)
  is compared with the pins, and a changed or new tool is blocked until re-approved;
- arguments are validated against the pinned input schema before the server sees them;
- results are untrusted observations: size-capped with a marker (the rest never enters
  the context), ``structuredContent`` validated against the pinned output schema,
  ``resource_link`` URIs shown but never fetched;
- a timeout or a dying server is ``dependency_unavailable`` for that call only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import anyio
import jsonschema
from mcp import Client, StdioServerParameters

from tether.errors import ConfigError, DependencyUnavailable, ToolError, ToolInputError, UpstreamError
from tether.mcp.elicitation import CallInfo
from tether.mcp.pinning import PinStore, ToolCheck, canonical_definition, check_listing
from tether.schema import SchemaViolation, UnusableSchema, check_arguments
from tether.schema import validate as validate_schema
from tether.tools.contract import Effect, Target, ToolContext, ToolOutput, ToolSpec
from tether.trace.events import EventKind

__all__ = ["SEPARATOR", "CapabilityBlocked", "InputPending", "McpServerSource"]

SEPARATOR = "__"
# Environment a stdio server inherits: nothing that could carry the user's or provider's credentials.
_SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "SYSTEMROOT", "VIRTUAL_ENV")
_CONNECTION_CLOSED = -32000


class CapabilityBlocked(ToolError):
    """The tool's definition is not approved (new, or changed since approval)."""

    kind = "capability_blocked"


class InputPending(ToolError):
    """The server asked a question nobody could answer now; the call is paused."""

    kind = "input_pending"

    def __init__(self, message: str, *, pause_id: str) -> None:
        super().__init__(
            message, hint="a person answers with `tether mcp resume`", details={"pause": pause_id}
        )
        self.meta = {"pause": pause_id}


class McpServerSource:
    """One client connection to one MCP server."""

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        effects: Mapping[str, Effect | str] | None = None,
        targets: Mapping[str, Target] | None = None,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        mode: str = "auto",
        timeout_s: float = 30.0,
        max_result_chars: int = 20_000,
        allow_tools: Iterable[str] | None = None,
        pins: PinStore | None = None,
        recheck: str = "each_call",
        elicitation: Any = None,
        sampling: Any = None,
        roots: Any = None,
        cwd: str | None = None,
        fail_soft: bool = False,
    ) -> None:
        if SEPARATOR in name or not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(
                f"server id {name!r} must be alphanumeric (with - or _) and not contain {SEPARATOR!r}"
            )
        if (command is None) == (url is None):
            raise ConfigError("give exactly one of command (stdio) or url (Streamable HTTP)")
        self.name = name
        self.command = list(command) if command else None
        self.url = url
        self.effects = {k: Effect(v) for k, v in (effects or {}).items()}
        self.targets = dict(targets or {})
        self.env = dict(env or {})
        self.headers = dict(headers or {})
        self.mode = mode
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self.allow_tools = frozenset(allow_tools) if allow_tools is not None else None
        self.pins = pins
        self.recheck = recheck
        self.elicitation = elicitation
        self.sampling = sampling
        self.roots = roots
        self.cwd = cwd
        # fail_soft: a server that cannot start or list is recorded as unavailable and offers no
        # tools, instead of failing the whole host (the other servers keep working).
        self.fail_soft = fail_soft
        self.unavailable: str | None = None
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._pinned: dict[str, dict[str, Any]] = {}  # remote name -> approved canonical definition
        self._live: dict[str, dict[str, Any]] = {}  # remote name -> last listed definition
        self.blocked: dict[str, str] = {}  # remote name -> why
        self.checks: list[ToolCheck] = []
        self._inflight: list[CallInfo] = []
        self._pending_events: list[tuple[EventKind, dict[str, Any]]] = []
        self._tracer: Any = None
        self.calls_sent = 0

    # -- identity and tracing ---------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What is launched or contacted, shown before the first launch (and traced)."""
        if self.command:
            return {"transport": "stdio", "command": shlex.join(self.command), "env_keys": sorted(self.env)}
        return {"transport": "streamable-http", "url": self.url, "header_keys": sorted(self.headers)}

    def endpoint(self) -> str:
        """A digest of what the pins were approved for: the exact command or URL."""
        ident = json.dumps(self.command) if self.command else str(self.url)
        return hashlib.sha256(ident.encode("utf-8")).hexdigest()

    def bind_tracer(self, tracer: Any) -> None:
        """Send this source's decisions to a run's tracer: first what happened before the run
        (the launch, recorded before it happened, and the pin checks), then everything after."""
        self._tracer = tracer
        pending, self._pending_events = self._pending_events, []
        if not any(kind is EventKind.SERVER_LAUNCH for kind, _ in pending):
            # Started during an earlier run (or not yet): still say what this run talks to.
            state = "running" if self._client is not None else "not_started"
            pending.insert(
                0, (EventKind.SERVER_LAUNCH, {"source": self.name, "state": state, **self.describe()})
            )
        for kind, data in pending:
            tracer.emit(kind, **data)

    def emit(self, kind: EventKind, **data: Any) -> None:
        if self._tracer is not None:
            self._tracer.emit(kind, **data)
        else:
            self._pending_events.append((kind, data))

    def current_call(self) -> CallInfo | None:
        """The call a server request belongs to: known when exactly one call is in flight."""
        return self._inflight[0] if len(self._inflight) == 1 else None

    def event_sink(self, kind: EventKind) -> Callable[[dict[str, Any]], None]:
        return lambda data: self.emit(kind, **data)

    # -- connection -------------------------------------------------------------------------

    async def _server(self, stack: AsyncExitStack) -> Any:
        if self.command:
            env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
            env.update(self.env)
            return StdioServerParameters(
                command=self.command[0], args=self.command[1:], env=env, cwd=self.cwd
            )
        assert self.url is not None
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # trust_env=False: no ~/.netrc credentials, no proxy settings from the user's environment
        # ride along to the server; the only credentials it gets are its configured headers.
        http = httpx2.AsyncClient(
            headers=self.headers or None,
            timeout=httpx2.Timeout(30.0, read=max(self.timeout_s, 30.0)),
            follow_redirects=False,
            trust_env=False,
        )
        # The transport does not close a client it was given: the stack does, after the session.
        await stack.enter_async_context(http)
        return streamable_http_client(self.url, http_client=http)

    async def start(self) -> None:
        if self._client is not None:
            return
        stack = AsyncExitStack()
        callbacks: dict[str, Any] = {}
        if self.elicitation is not None:
            callbacks["elicitation_callback"] = self.elicitation
        if self.sampling is not None:
            callbacks["sampling_callback"] = self.sampling
        if self.roots is not None:
            callbacks["list_roots_callback"] = self.roots
        launched_at = datetime.now(UTC).isoformat(timespec="microseconds")
        # Recorded before the launch: the exact command (or URL) is on record even if it hangs.
        self.emit(
            EventKind.SERVER_LAUNCH, source=self.name, state="launching", at=launched_at, **self.describe()
        )
        try:
            # No cancel scope around the enter: the client's task group must outlive this frame.
            client = await stack.enter_async_context(
                Client(
                    await self._server(stack),
                    mode=self.mode,
                    read_timeout_seconds=self.timeout_s,
                    message_handler=self._on_message,
                    **callbacks,
                )
            )
        except Exception as err:
            with contextlib.suppress(Exception):
                await stack.aclose()
            problem = DependencyUnavailable(f"MCP server {self.name} could not be started: {_describe(err)}")
            if not self.fail_soft:
                raise problem from err
            self._mark_unavailable(problem.message)
            return
        self._hook_listings(client)
        self._client, self._stack = client, stack

    def _hook_listings(self, client: Client) -> None:
        """Every tool listing the session absorbs (ours, cache hits, the SDK's silent re-lists
        after a header mismatch or for output validation) passes the pin check."""
        session = client.session
        absorb = session._absorb_tool_listing  # private seam: the one place all listings pass

        def checked(result: Any, *, complete: bool) -> Any:
            out = absorb(result, complete=complete)
            self._check(out.tools, complete=complete)
            return out

        session._absorb_tool_listing = checked  # type: ignore[method-assign]

    async def _on_message(self, message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None) or getattr(
            message, "method", None
        )
        if method == "notifications/tools/list_changed":
            self.emit(EventKind.MCP_CAPABILITY_CHECK, server=self.name, trigger="list_changed")
            self._stale = True

    _stale = False

    # -- listing and pins -------------------------------------------------------------------

    def _check(self, tools: Sequence[Any], *, complete: bool = True) -> None:
        """Compare a listing with the pins. A partial listing (one page) never unlists tools."""
        definitions = [canonical_definition(t) for t in tools]
        listed = {d["name"]: d for d in definitions}
        self._live = listed if complete else {**self._live, **listed}
        if self.pins is None:
            self._pinned = dict(self._live)
            return
        if not complete and not definitions:
            return
        checks = check_listing(definitions, self.pins.pins(self.name), self.endpoint())
        self.checks = checks
        duplicated = {c.tool for c in checks if c.why == "listed more than once"}
        for name in duplicated:
            self._pinned.pop(name, None)
        for c in checks:
            if c.status == "pinned" and c.tool not in duplicated:
                if c.tool in self.blocked:
                    # Back to the approved definition: unblock (the pin never changed).
                    del self.blocked[c.tool]
                self._pinned[c.tool] = c.definition
                continue
            if self.blocked.get(c.tool) != c.why:
                self.blocked[c.tool] = c.why
                self.emit(
                    EventKind.MCP_CAPABILITY_BLOCKED,
                    server=self.name,
                    tool=f"{self.name}{SEPARATOR}{c.tool}",
                    status=c.status,
                    why=c.why,
                    sha256=c.sha256,
                    pinned_sha256=c.pinned_sha256,
                )
        if complete:
            for name in sorted(set(self._pinned) - set(self._live)):
                self._pinned.pop(name)
                self.blocked[name] = "no longer listed by the server"
                self.emit(
                    EventKind.MCP_CAPABILITY_BLOCKED,
                    server=self.name,
                    tool=f"{self.name}{SEPARATOR}{name}",
                    status="removed",
                    why=self.blocked[name],
                )

    async def refresh(self) -> list[ToolCheck]:
        """List the server's tools now (bypassing the response cache); the hook checks them."""
        client = self._require()
        cursor: str | None = None
        tools: list[Any] = []
        for _ in range(100):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        if cursor is not None or len(tools) != len(self._live):
            self._check(tools)  # several pages: check the union as one complete listing
        self._stale = False
        return self.checks

    def _mark_unavailable(self, why: str) -> None:
        self.unavailable = why
        self.emit(EventKind.SERVER_LAUNCH, source=self.name, state="failed", error=why, **self.describe())

    async def list_tools(self) -> list[ToolSpec]:
        if self.unavailable is not None:
            return []
        try:
            with anyio.fail_after(self.timeout_s):
                await self.refresh()
        except Exception as err:
            problem = DependencyUnavailable(
                f"MCP server {self.name} did not list its tools: "
                + ("timed out" if isinstance(err, TimeoutError) else _describe(err))
            )
            if not self.fail_soft:
                raise problem from None
            self._mark_unavailable(problem.message)
            return []
        specs = []
        for remote, d in sorted(self._pinned.items()):
            if remote in self.blocked:
                continue
            if self.allow_tools is not None and remote not in self.allow_tools:
                continue
            annotations = d.get("annotations") or {}
            specs.append(
                ToolSpec(
                    name=f"{self.name}{SEPARATOR}{remote}",
                    description=d.get("description") or "",
                    parameters=d.get("inputSchema") or {"type": "object"},
                    # The host's declaration wins over the server's annotations; undeclared = side-effecting.
                    effect=self.effects.get(remote, Effect.WRITE),
                    source=self.name,
                    target=self.targets.get(remote),
                    timeout_s=self.timeout_s,
                    max_result_chars=self.max_result_chars,
                    remote_name=remote,
                    meta={"server_annotations": annotations, "untrusted_hints": True},
                )
            )
        return specs

    def validate(self, remote_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the pinned input schema with the host's one schema engine
        (the gate runs the same check on the offered spec). Raises ``ToolInputError``."""
        definition = self._pinned.get(remote_name)
        if definition is None:
            raise ToolInputError(f"unknown tool {remote_name!r} on server {self.name}")
        try:
            return check_arguments(definition.get("inputSchema") or {"type": "object"}, arguments)
        except UnusableSchema as err:  # an invalid or unresolvable schema is the server's fault
            raise ToolInputError(
                f"the input schema of {remote_name} on server {self.name} is unusable: {err}"
            ) from None
        except SchemaViolation as err:
            raise ToolInputError(
                str(err), hint="match the tool's input schema exactly", details=dict(err.details)
            ) from None

    def _refuse_unapproved(self, spec: ToolSpec) -> None:
        remote = spec.remote_name
        if remote in self.blocked:
            raise CapabilityBlocked(
                f"{spec.name} is blocked: {self.blocked[remote]} since approval",
                hint=f"a person must review and approve it again (tether mcp approve {self.name})",
            )
        if remote not in self._pinned or (self.allow_tools is not None and remote not in self.allow_tools):
            raise CapabilityBlocked(f"{spec.name} is not an approved tool of server {self.name}")

    # -- calls ------------------------------------------------------------------------------

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        client = self._require()
        self._refuse_unapproved(spec)
        if self.pins is not None and (self.recheck == "each_call" or self._stale):
            try:
                with anyio.fail_after(spec.timeout_s):
                    await self.refresh()
            except TimeoutError:
                raise DependencyUnavailable(
                    f"MCP server {self.name} did not list its tools in time"
                ) from None
            except Exception as err:
                raise self._unavailable(err) from None
            self._refuse_unapproved(spec)
        info = CallInfo(context.run_id, context.call_id, spec.name, dict(arguments))
        self._inflight.append(info)
        self.calls_sent += 1
        try:
            with anyio.fail_after(spec.timeout_s):
                result = await client.call_tool(spec.remote_name, arguments)
        except TimeoutError:
            raise DependencyUnavailable(f"{spec.name} timed out after {spec.timeout_s:g}s") from None
        except RuntimeError as err:
            if "structured content" in str(err) or "schema" in str(err):
                return self._invalid_output(spec, str(err))
            raise self._unavailable(err) from None
        except Exception as err:
            raise self._unavailable(err) from None
        finally:
            self._inflight.remove(info)
        if info.pause_id is not None:
            raise InputPending(
                f"{spec.name} is waiting for a person to answer a question from server {self.name} "
                f"(pause {info.pause_id})",
                pause_id=info.pause_id,
            )
        return self._output(spec, result)

    def _unavailable(self, err: BaseException) -> ToolError:
        if isinstance(err, BaseExceptionGroup):
            from tether.tools.contract import unwrap_exception_group

            err = unwrap_exception_group(err)
        if type(err).__name__ == "MCPError" and getattr(err, "code", None) != _CONNECTION_CLOSED:
            return UpstreamError(f"server {self.name} failed: {err}")
        if isinstance(err, ToolError):
            return err
        return DependencyUnavailable(f"MCP server {self.name} is not reachable: {type(err).__name__}: {err}")

    def _invalid_output(self, spec: ToolSpec, why: str) -> ToolOutput:
        self.emit(
            EventKind.MCP_RESULT_REJECTED, server=self.name, tool=spec.name, reason="output_schema", why=why
        )
        message = "the server returned structured content that does not match the approved output schema"
        return ToolOutput(
            text=json.dumps({"error": "invalid_output", "message": message}),
            is_error=True,
            error_kind="invalid_output",
        )

    def _output(self, spec: ToolSpec, result: Any) -> ToolOutput:
        parts: list[str] = []
        links = []
        for c in result.content:
            kind = getattr(c, "type", "")
            if kind == "text":
                parts.append(c.text)
            elif kind == "resource_link":
                # Shown as data, never fetched: a link is the server's claim, not the host's errand.
                links.append(str(c.uri))
                parts.append(f"[resource_link not fetched: {c.uri} ({getattr(c, 'name', '')})]")
            elif kind == "resource":
                res = c.resource
                text = getattr(res, "text", None)
                parts.append(text if text is not None else f"[embedded binary resource omitted: {res.uri}]")
            else:
                parts.append(f"[{kind} content omitted]")
        text = "\n".join(parts)
        data: Any = result.structured_content
        definition = self._pinned.get(spec.remote_name, {})
        output_schema = definition.get("outputSchema")
        if output_schema is not None and not result.is_error:
            try:
                _validate(data, output_schema)
            except jsonschema.ValidationError as err:
                return self._invalid_output(spec, err.message)
            except jsonschema.SchemaError as err:
                return self._invalid_output(spec, f"invalid output schema: {err.message}")
            except Exception as err:  # e.g. a $ref that does not resolve (never fetched)
                return self._invalid_output(spec, f"unusable output schema: {type(err).__name__}")
        if data is None and len(parts) == 1:
            try:
                data = json.loads(parts[0])
            except ValueError:
                data = None
        meta: dict[str, Any] = {"server": self.name}
        if links:
            meta["resource_links"] = links
        total = len(text)
        truncated = False
        if total > spec.max_result_chars:
            marker = (
                f"\n[TRUNCATED by host: {total} characters from server {self.name}; only the first "
                f"{{shown}} are shown, the rest was kept out of context]"
            )
            shown = max(0, spec.max_result_chars - len(marker) - 8)
            text = text[:shown] + marker.format(shown=shown)
            data = None  # structured data would carry the whole payload past the cap
            truncated = True
            self.emit(
                EventKind.MCP_RESULT_REJECTED,
                server=self.name,
                tool=spec.name,
                reason="oversized",
                chars=total,
            )
        if result.is_error:
            return ToolOutput(text=text, data=data, is_error=True, error_kind="server_error", meta=meta)
        return ToolOutput(text=text, data=data, truncated=truncated, meta=meta)

    # -- roots ------------------------------------------------------------------------------

    async def set_roots(self, roots: Iterable[str]) -> bool:
        """Change this server's roots; on a legacy connection, notify the server."""
        if self.roots is None:
            raise ConfigError(f"server {self.name} has no roots declared")
        changed: bool = self.roots.set_roots(roots)
        client = self._client
        if changed and client is not None and not str(client.protocol_version).startswith("2026"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.send_roots_list_changed()
            self.emit(
                EventKind.MCP_ROOTS,
                server=self.name,
                action="list_changed_sent",
                roots=list(self.roots.roots),
            )
        return changed

    # -- lifecycle --------------------------------------------------------------------------

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            # A dead server's pipes may fail to close; nothing is left to protect.
            with contextlib.suppress(Exception):
                await stack.aclose()

    def _require(self) -> Client:
        if self._client is None:
            raise DependencyUnavailable(self.unavailable or f"MCP server {self.name} is not connected")
        return self._client


def _validate(instance: Any, schema: dict[str, Any]) -> None:
    """Check a result against its output schema with the host's one schema engine (exact types,
    references resolved only inside the schema: nothing is ever fetched). Failures are raised as
    ``jsonschema`` errors, which the result handling reports as ``invalid_output``."""
    try:
        validate_schema(schema, instance)
    except UnusableSchema as err:
        raise jsonschema.SchemaError(str(err)) from None
    except SchemaViolation as err:
        raise jsonschema.ValidationError(str(err)) from None


def _describe(err: BaseException) -> str:
    """The leaf error of a TaskGroup failure, as one line."""
    from tether.tools.contract import unwrap_exception_group

    leaf = unwrap_exception_group(err)
    return f"{type(leaf).__name__}: {leaf}"
