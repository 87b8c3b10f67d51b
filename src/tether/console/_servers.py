"""MCP servers (X2): what each may do, its pins, a live review of its tools (hidden characters
flagged, a diff against the pin) and pinning. They belong to the config's ``host.tenant``: its
viewers see them, its admins review (which starts or contacts the server) and pin.
"""

from __future__ import annotations

import difflib
import json
import shlex
from typing import Any

from tether.console._render import hidden_chars, names_in, pretty_json
from tether.console._sources import ConsoleSources
from tether.console._users import Denied, Hidden, Principal
from tether.errors import ApprovalError, TetherError
from tether.mcp._shown import shown_launch

__all__ = ["definition_diff", "pin", "review", "servers"]


def _admin(sources: ConsoleSources, principal: Principal) -> str:
    """The servers' tenant, where ``principal`` is an admin. Raises ``Hidden``, ``Denied``."""
    if sources.mcp_config is None or not principal.sees(sources.mcp_config.host.tenant):
        raise Hidden("server")
    tenant = sources.mcp_config.host.tenant
    if not principal.may(tenant, "admin"):
        raise Denied("not_admin", f"{principal.name} may not pin servers here")
    return tenant


async def servers(sources: ConsoleSources, principal: Principal) -> list[dict[str, Any]]:
    """Configured servers with their pins; credentials are named, never shown."""
    if sources.mcp_config is None or not principal.sees(sources.mcp_config.host.tenant):
        return []
    out = []
    for s in sources.mcp_config.servers:
        pins = await sources.pins(s.name)
        out.append(
            {
                "name": s.name,
                "transport": s.transport,
                "where": shown_launch(s.argv()) if s.transport == "stdio" else shown_launch(url=str(s.url)),
                "tools": s.tools,
                "effects": {k: str(v) for k, v in s.effects.items()},
                "elicitation": s.elicitation.enabled,
                "url_mode": s.elicitation.url_mode,
                "sampling": s.sampling.enabled,
                "credential_names": sorted(s.credentials),
                "header_names": sorted(s.headers),
                "env_names": sorted(s.env),
                "pins": [
                    {
                        "tool": p.tool,
                        "sha256": p.sha256,
                        "approved_by": p.approved_by,
                        "approved_at": p.approved_at,
                    }
                    for p in sorted(pins.values(), key=lambda p: p.tool)
                ],
            }
        )
    return out


def _lines(definition: dict[str, Any] | None) -> list[str]:
    if definition is None:
        return []
    return pretty_json(definition).splitlines()  # cut past ``SHOWN_DEPTH`` levels, as shown


def definition_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, str]]:
    """A unified diff of two tool definitions as (kind, line): kind is ``+``, ``-``, ``@`` or ``" "``."""
    out = []
    for line in difflib.unified_diff(_lines(old), _lines(new), "pinned", "listed now", lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        out.append((line[0] if line[:1] in "+-@" else " ", line))
    return out


async def review(sources: ConsoleSources, principal: Principal, name: str) -> dict[str, Any]:
    """Connect to the server and compare every tool with its pin; audited."""
    from tether.mcp._approve import review_server

    tenant = _admin(sources, principal)
    assert sources.mcp_config is not None
    try:
        sources.mcp_config.server(name)  # ConfigError for an unknown name
        result = await review_server(sources.mcp_config, name)
    except TetherError as err:
        sources.users.refused(principal.actor, "review", err, tenant=tenant, target=name)
        raise
    sources.users.audit(principal.actor, "review", tenant=tenant, target=name, content_hash=result.digest)
    pins = await sources.pins(name)
    tools = []
    for tr in result.tools:
        c = tr.check
        pinned = pins.get(c.tool)
        diff = definition_diff(pinned.definition, c.definition) if pinned and c.status == "changed" else []
        text = json.dumps(c.definition, ensure_ascii=False)
        tools.append(
            {
                **tr.to_json(),
                "hidden": hidden_chars(text),
                "names": names_in(c.definition),
                "flagged": tr.flagged,
                "diff": diff,
                "pinned_by": pinned.approved_by if pinned else None,
            }
        )
    launch = dict(result.launch)
    if launch.get("url"):
        launch["url"] = shown_launch(url=str(launch["url"]))
    if launch.get("command"):
        launch["command"] = shown_launch(shlex.split(str(launch["command"])))
    # Listed but never offered (a definition the SDK refuses, nested past what the transport reads,
    # too large, for the server's app only): named with why, as ``tether mcp review`` names them.
    left_out = [{"tool": tool, "why": why} for tool, why in result.invalid.items()]
    return {
        "server": name,
        "launch": launch,
        "digest": result.digest,
        "tools": tools,
        "left_out": left_out,
        "warnings": list(result.warnings),
    }


async def pin(
    sources: ConsoleSources,
    principal: Principal,
    name: str,
    *,
    digest: str,
    tools: set[str],
    accept_flagged: set[str],
) -> dict[str, Any]:
    """Pin exactly the reviewed listing (``digest``), else nothing; audited."""
    from tether.mcp._approve import approve_server

    tenant = _admin(sources, principal)
    assert sources.mcp_config is not None
    actor = principal.actor
    try:
        if not digest:
            raise ApprovalError("digest_required", "pinning names the review digest that was reviewed")
        if not tools:
            raise ApprovalError("nothing_selected", "select at least one tool to pin")
        _, pinned, skipped = await approve_server(
            sources.mcp_config,
            name,
            actor=f"console:{principal.name}",
            accept_flagged=accept_flagged & tools,
            only=tools,
            expect=digest,
        )
    except TetherError as err:
        sources.users.refused(actor, "pin", err, tenant=tenant, target=name, content_hash=digest)
        raise
    sources.users.audit(
        actor,
        "pin",
        tenant=tenant,
        target=name,
        content_hash=digest,
        outcome="ok",
        detail=json.dumps({"pinned": pinned, "skipped": skipped}, ensure_ascii=False),
    )
    return {"server": name, "pinned": pinned, "skipped": skipped, "digest": digest}
