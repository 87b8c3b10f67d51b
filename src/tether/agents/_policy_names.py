"""The tool names an agent file's policy writes (``allow``, ``deny``, ``effects``) must name tools
the agent has: a mistyped name would otherwise be ignored without a word — an ``allow`` entry
that allows nothing, a ``deny`` entry that denies nothing, an effect no tool gets."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from tether.agents._file import AgentFile, mcp_config
from tether.core._names import SEPARATOR
from tether.errors import ConfigError

__all__ = ["check_policy_names"]

# The context engine's own tools (always offered when configured; naming them is harmless).
HARNESS_TOOLS = frozenset(
    {"read_output", "load_skill", "read_skill_file", "rewrite_todo_list", "update_todo_status", "tool_search"}
)


def check_policy_names(af: AgentFile, local: Sequence[str]) -> None:
    """Raise ``ConfigError`` naming the first ``policy.allow``, ``policy.deny``, ``policy.effects`` or
    ``context.subagents[i].tools`` entry that names no tool of the agent: not a local tool
    (``local``: their names), a subagent, a harness tool, nor ``<server>__<tool>`` of a configured
    MCP server. ``deny`` may also name an MCP tool by its server's own name, so with MCP servers it
    is not checked."""
    p = af.spec.policy
    known = {*local, *HARNESS_TOOLS, *(s.name for s in af.spec.context.subagents)}
    lists = {"policy.allow": p.allow or [], "policy.effects": list(p.effects)}
    if af.spec.mcp is None:
        lists["policy.deny"] = list(p.deny)
    # A subagent's tools too: a mistyped one left the subagent without it, without a word.
    lists.update(
        {f"context.subagents[{i}].tools": s.tools or [] for i, s in enumerate(af.spec.context.subagents)}
    )
    unknown = [(field, n) for field, names in lists.items() for n in names if n not in known]
    if not unknown:
        return
    servers = [s.name for s in mcp_config(af).servers] if af.spec.mcp is not None else []
    for field, name in unknown:
        if field != "policy.effects" and any(name.startswith(f"{server}{SEPARATOR}") for server in servers):
            continue
        raise ConfigError(f"{af.label()}: {field}: {_why(name, field, sorted(local), servers)}")


def _why(name: str, field: str, local: list[str], servers: list[str]) -> str:
    why = f"{name!r} names no tool of this agent"
    if field == "policy.effects":
        why += " (effects of its local plain-function tools; an MCP tool's go in the MCP config)"
    elif servers:
        why += f" (an MCP tool is named <server>{SEPARATOR}<tool>: servers {', '.join(servers)})"
    close = difflib.get_close_matches(name, local, n=1)
    tools = f"did you mean {close[0]}?" if close else f"its tools: {', '.join(local) or 'none'}"
    return f"{why}; {tools}"
