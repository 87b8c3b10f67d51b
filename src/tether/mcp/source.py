"""An MCP server as a tool source, through the official ``mcp`` SDK (stdio or Streamable HTTP).

Connecting a server creates no trust: tool names are namespaced with an id the host
assigns (``<server>__<tool>``), effects come from the host's declaration (an undeclared
tool is treated as side-effecting), arguments are validated against the input schema
before the server sees them, and every result is an untrusted observation.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
import jsonschema
from mcp import Client, StdioServerParameters

from tether.errors import ConfigError, DependencyUnavailable, ToolInputError, UpstreamError
from tether.tools.contract import Effect, Target, ToolContext, ToolOutput, ToolSpec

__all__ = ["SEPARATOR", "McpServerSource"]

SEPARATOR = "__"
# Environment a stdio server inherits: nothing that could carry the user's or provider's credentials.
_SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "SYSTEMROOT", "VIRTUAL_ENV")


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
        mode: str = "auto",
        timeout_s: float = 30.0,
        max_result_chars: int = 20_000,
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
        self.mode = mode
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._schemas: dict[str, dict[str, Any]] = {}
        self.calls_sent = 0

    def describe(self) -> dict[str, Any]:
        """What is launched or contacted, shown before the first launch (and traced)."""
        if self.command:
            return {"transport": "stdio", "command": shlex.join(self.command), "env_keys": sorted(self.env)}
        return {"transport": "streamable-http", "url": self.url}

    def _server(self) -> StdioServerParameters | str:
        if self.command:
            env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
            env.update(self.env)
            return StdioServerParameters(command=self.command[0], args=self.command[1:], env=env)
        assert self.url is not None
        return self.url

    async def start(self) -> None:
        if self._client is not None:
            return
        stack = AsyncExitStack()
        try:
            # No cancel scope around the enter: the client's task group must outlive this frame.
            client = await stack.enter_async_context(
                Client(self._server(), mode=self.mode, read_timeout_seconds=self.timeout_s)
            )
        except Exception as err:
            await stack.aclose()
            raise DependencyUnavailable(f"MCP server {self.name} could not be started: {err}") from err
        self._client, self._stack = client, stack

    async def list_tools(self) -> list[ToolSpec]:
        client = self._require()
        listed = await client.list_tools()
        specs = []
        for t in listed.tools:
            self._schemas[t.name] = t.input_schema
            specs.append(
                ToolSpec(
                    name=f"{self.name}{SEPARATOR}{t.name}",
                    description=t.description or "",
                    parameters=t.input_schema,
                    # The host's declaration wins over the server's annotations; undeclared = side-effecting.
                    effect=self.effects.get(t.name, Effect.WRITE),
                    source=self.name,
                    target=self.targets.get(t.name),
                    timeout_s=self.timeout_s,
                    max_result_chars=self.max_result_chars,
                    remote_name=t.name,
                )
            )
        return specs

    def validate(self, remote_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        schema = self._schemas.get(remote_name)
        if schema is None:
            raise ToolInputError(f"unknown tool {remote_name!r} on server {self.name}")
        try:
            jsonschema.validate(arguments, schema)
        except jsonschema.ValidationError as err:
            path = ".".join(str(p) for p in err.absolute_path) or "(arguments)"
            raise ToolInputError(
                f"{path}: {err.message}", hint="match the tool's input schema exactly"
            ) from None
        return arguments

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        client = self._require()
        self.calls_sent += 1
        try:
            with anyio.fail_after(spec.timeout_s):
                result = await client.call_tool(spec.remote_name, arguments)
        except TimeoutError:
            raise DependencyUnavailable(f"{spec.name} timed out after {spec.timeout_s:g}s") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, EOFError) as err:
            raise DependencyUnavailable(
                f"MCP server {self.name} is not reachable: {type(err).__name__}"
            ) from None
        except Exception as err:  # the SDK raises MCPError for protocol-level failures
            if type(err).__name__ == "MCPError":
                raise UpstreamError(f"{spec.name} failed: {err}") from None
            raise DependencyUnavailable(
                f"MCP server {self.name} failed: {type(err).__name__}: {err}"
            ) from None
        texts = [getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text"]
        text = "\n".join(texts)
        data: Any = result.structured_content
        if data is None and len(texts) == 1:
            try:
                data = json.loads(texts[0])
            except ValueError:
                data = None
        if result.is_error:
            return ToolOutput(text=text, data=data, is_error=True, error_kind="server_error")
        return ToolOutput(text=text, data=data)

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            # A dead server's pipes may fail to close; nothing is left to protect.
            with contextlib.suppress(Exception):
                await stack.aclose()

    def _require(self) -> Client:
        if self._client is None:
            raise DependencyUnavailable(f"MCP server {self.name} is not connected")
        return self._client
