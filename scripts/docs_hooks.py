"""MkDocs hooks: the reference pages generated from the code at build time.

A page asks for a generated section with a marker on a line of its own::

    <!-- generated: cli -->

and the hook replaces it with Markdown built from the code that defines it: the argparse parser
(``tether.cli.build_parser``), the agent file's pydantic models (``tether.agents._spec.AgentSpec``),
the typed trace payloads (``tether.trace._events.PAYLOADS``), the exit-code table
(``tether.clisupport.output.EXIT_CODES``) and ``StopReason``. A marker with no generator, a stop
reason or trace event kind with no description here, or a description of one the code no longer
has fails the build (``mkdocs build --strict`` runs in the test command).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
for sub in ("src",):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


class DocsError(Exception):
    """A generated page cannot be built from the code as it is."""


# -- the CLI ----------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    out: list[tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:  # argparse has no public walk of its sub-commands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                out.append((name, child, helps.get(name, "")))
    return out


def cli_reference() -> str:
    from tether.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps help text to the terminal: a fixed width
    parser = build_parser()
    parts: list[str] = []

    def walk(p: argparse.ArgumentParser, path: str, summary: str, depth: int) -> None:
        heading = "#" * min(depth, 4)
        parts.append(f"{heading} `{path}`\n")
        if summary:
            parts.append(f"{summary[0].upper()}{summary[1:]}.\n")
        parts.append("```text\n" + p.format_help().rstrip() + "\n```\n")
        for name, child, helptext in _subcommands(p):
            walk(child, f"{path} {name}", helptext, depth + 1)

    parts.append("```text\n" + parser.format_help().rstrip() + "\n```\n")
    for name, child, helptext in _subcommands(parser):
        walk(child, f"tether {name}", helptext, 2)
    return "\n".join(parts)


# -- the agent file -----------------------------------------------------------------------------


def _type_of(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type_of(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " or ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(schema.get('items', {}))}"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"mapping of {_type_of(extra)}" if isinstance(extra, dict) and extra else "mapping"
    return str(kind)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from ``root``'s fields, by class name (as in ``$defs``)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ not in found:
                found[tp.__name__] = tp
                for f in tp.model_fields.values():
                    visit(f.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return found


def _default(model: type[BaseModel] | None, field: str, prop: dict[str, Any]) -> str:
    """A field's default as the loader applies it (default factories called)."""
    info = model.model_fields.get(field) if model is not None else None
    if info is None:
        return f"`{json.dumps(prop.get('default'))}`"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its defaults"
    return f"`{json.dumps(value, default=str)}`"


def _model_table(name: str, schema: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    lines = [f"### {name}\n"]
    if schema.get("description"):
        lines.append(_cell(schema["description"]) + "\n")
    if "enum" in schema:
        return "\n".join([*lines, f"One of {_type_of(schema)}.\n"])
    required = set(schema.get("required", ()))
    lines.append("| field | type | default | description |")
    lines.append("| --- | --- | --- | --- |")
    for field, prop in schema.get("properties", {}).items():
        default = "required" if field in required else _default(model, field, prop)
        description = _cell(prop.get("description", ""))
        lines.append(f"| `{field}` | {_cell(_type_of(prop))} | {_cell(default)} | {description} |")
    return "\n".join(lines) + "\n"


def agent_file_reference() -> str:
    from tether.agents._spec import AgentSpec

    schema = AgentSpec.model_json_schema()
    defs = schema.pop("$defs", {})
    models = _models(AgentSpec)
    parts = [_model_table("AgentSpec", schema, AgentSpec)]
    parts += [_model_table(name, sub, models.get(name)) for name, sub in sorted(defs.items())]
    return "\n".join(parts)


# -- trace events ----------------------------------------------------------------------------

EVENT_DESCRIPTIONS: dict[str, str] = {
    "run_started": "a run (or a part of one: a workflow, a plan) began: design, objective, tenant, roles",
    "context_composed": "a model request was composed: its size, tools, and how much of it repeats the last",
    "model_request": "kept for older traces; new runs trace `context_composed` instead",
    "model_response": "the model answered: text, tool calls, tokens, cost, finish, retries, fallbacks",
    "model_error": "a model call failed after its retries",
    "tool_proposed": "the model proposed a tool call (arguments cut at 2,000 characters, secrets redacted)",
    "policy_allowed": "the policy allowed a call, naming the rule",
    "policy_denied": "the policy or strict intake refused a call, with the reason and the rule",
    "tool_observation": "a tool returned: its source, trust label, size, and whether it was cleaned or cut",
    "tool_error": "a tool raised a recoverable error (`ToolError`); the model reads the message",
    "tool_crashed": "a tool raised an unexpected exception",
    "server_launch": "an MCP server is about to start (the exact command or URL), started or failed",
    "mcp_connection": "an MCP connection was lost, restarted or failed to start, with its cause",
    "mcp_sandbox": "a stdio MCP server was confined, started unconfined (a warning) or refused",
    "mcp_progress": "an MCP server reported progress on a call",
    "mcp_log": "an MCP server sent a log notification (escaped, cut, rate-limited; never shown to the model)",
    "mcp_task": "a task-augmented MCP call was created, polled to its end, or cancelled",
    "memory_retrieved": "a memory record entered the context",
    "memory_rejected": "a memory record was kept out: expired, another tenant's, or not allowed",
    "memory_written": "a memory record was stored",
    "memory_refused": "a proposed memory record was refused",
    "handoff_validated": "the run's handoff passed validation",
    "handoff_rejected": "the run's handoff was rejected (an unbacked claim, a missing field)",
    "verification_failed": "the verify hook rejected a final answer",
    "budget_exhausted": "a budget tripped: who answered the last turn, and why",
    "repetition_detected": "the model repeated the same turns",
    "rollback": "an agent run was rolled back to its workflow",
    "workflow_step": "a workflow step ran",
    "stop": "the run stopped: its one stop reason",
    "mcp_capability_blocked": "a changed, new or vanished MCP tool was blocked until approved again",
    "mcp_capability_check": "an MCP listing was compared with the pins",
    "mcp_result_rejected": "an MCP result was refused or cut: hidden content, oversize, output schema",
    "mcp_elicitation": "an MCP server asked a question: what became of it, and who decided",
    "mcp_sampling": "an MCP server asked for a model completion: answered or refused",
    "mcp_roots": "an MCP server asked for its roots",
    "approval_requested": "a call needs a person's approval: the proposal id and its content hash",
    "approval_granted": "a person approved a proposal: reviewer, time, content hash",
    "approval_denied": "a proposal was denied or invalidated, or differs from what was approved",
    "run_paused": "the run was checkpointed to wait for a person",
    "run_resumed": "a paused or stopped run continued",
    "effect_intent": "a side effect is about to run: its idempotency key is recorded first",
    "effect_recorded": "a side effect's outcome was recorded",
    "effect_replayed": "a recorded outcome was returned instead of running the effect again",
    "effect_reconciled": "an effect cut between intent and outcome was settled by its reconciler",
    "effect_escalated": "an effect's outcome is unknown and a person must resolve it",
    "context_compressed": "tool results were summarised to fit the context window",
    "compression_failed": "a summary failed; the raw text stayed",
    "compression_circuit_open": "summaries failed too often in a row and were switched off for the run",
    "context_compacted": "the oldest rounds were replaced by a digest",
    "context_overflow": "the request could not fit the window even after compression",
    "output_stored": "a large tool result was stored out of context, with a preview",
    "skill_loaded": "a skill was loaded into the context",
    "skill_refused": "a skill was refused (untrusted and not approved, or outside its folder)",
    "tool_schemas_loaded": "tool search loaded full tool schemas",
    "subagent_finished": "a subagent's run ended; links its trace",
}


def _field_comments() -> dict[str, dict[str, str]]:
    """The ``# comment`` beside each field in the payload table's source, by kind and field."""
    import tether.trace._payloads as payloads

    source = inspect.getsource(payloads)
    lines = source.splitlines()
    tree = ast.parse(source)
    named = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets)
        if isinstance(t, ast.Name) and node.value is not None
    }

    def fields(node: ast.expr | None) -> dict[str, str]:
        if isinstance(node, ast.Name):
            node = named.get(node.id)
        out: dict[str, str] = {}
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:  # **_SHARED
                    out.update(fields(value))
                elif isinstance(key, ast.Constant):
                    ends = {key.lineno, value.end_lineno or key.lineno}  # a wrapped type: after it
                    found = [m for n in sorted(ends) if (m := re.search(r"#\s*(.+)$", lines[n - 1]))]
                    if found:
                        out[str(key.value)] = found[0].group(1).strip()
        return out

    table = named["PAYLOADS"]
    assert isinstance(table, ast.Dict)
    return {
        key.attr.lower(): fields(value)
        for key, value in zip(table.keys, table.values, strict=True)
        if isinstance(key, ast.Attribute)
    }


def _hint(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Required, typing.NotRequired):
        return _hint(typing.get_args(tp)[0])
    text = tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp)
    return text.replace("typing.", "").replace(" | ", " or ")  # a pipe would split the table cell


def trace_events_reference() -> str:
    from tether.trace._events import EventKind
    from tether.trace._payloads import PAYLOADS

    kinds = {str(k) for k in EventKind}
    missing, stale = kinds - EVENT_DESCRIPTIONS.keys(), EVENT_DESCRIPTIONS.keys() - kinds
    if missing or stale:
        raise DocsError(f"trace event descriptions: missing {sorted(missing)}, stale {sorted(stale)}")
    parts = ["| kind | what it records |", "| --- | --- |"]
    parts += [f"| [`{k}`](#{k}) | {EVENT_DESCRIPTIONS[str(k)]} |" for k in EventKind]
    parts.append("")
    notes = _field_comments()
    for kind in EventKind:
        hints, comments = PAYLOADS[kind], notes.get(str(kind), {})
        required = {name for name, tp in hints.items() if typing.get_origin(tp) is typing.Required}
        parts.append(f"### {kind}\n")
        parts.append(f"{EVENT_DESCRIPTIONS[str(kind)][0].upper()}{EVENT_DESCRIPTIONS[str(kind)][1:]}.\n")
        if not hints:
            parts.append("No payload fields.\n")
            continue
        parts.append("| field | type | required | note |")
        parts.append("| --- | --- | --- | --- |")
        for name, tp in hints.items():
            yes = "yes" if name in required else ""
            parts.append(f"| `{name}` | `{_hint(tp)}` | {yes} | {_cell(comments.get(name, ''))} |")
        parts.append("")
    return "\n".join(parts)


# -- exit codes and stop reasons -------------------------------------------------------------

STOP_DESCRIPTIONS: dict[str, str] = {
    "accepted": "the run answered and every check (verify hook, handoff) passed",
    "policy_denied": "the policy refused a call and `policy.on_denied` is `stop`",
    "approval_required": "a call waits for a person's approval, or an MCP server's question for an answer",
    "approval_denied": "a person denied or invalidated a proposal, or the call differs from the approved one",
    "budget": "an LLM-call, token or cost budget ran out",
    "deadline": "the run's deadline passed",
    "max_steps": "the step cap was reached",
    "repetition": "the model repeated the same turns",
    "dependency_unavailable": "a tool's server or dependency could not be reached",
    "invalid_handoff": "the run's handoff failed validation (an unbacked claim, a missing part)",
    "model_error": "the model failed: retries spent, an unusable answer, too many malformed turns",
    "truncated": "the final answer was cut at the output-token limit",
    "model_refused": "the provider refused or filtered the final answer",
    "internal_error": "a fault in the host (a bug): the trace says where",
    "interrupted": "SIGINT or SIGTERM stopped `tether run`/`resume`: trace closed, checkpoint written",
}


def exit_codes_reference() -> str:
    from tether.clisupport.output import EXIT_CODES, EXIT_MEANINGS, USAGE
    from tether.core.stop import StopReason

    reasons = {str(r) for r in StopReason}
    missing = reasons - STOP_DESCRIPTIONS.keys() or reasons - EXIT_CODES.keys()
    stale = STOP_DESCRIPTIONS.keys() - reasons
    if missing or stale:
        why = f"undocumented or without an exit code {sorted(missing)}, stale {sorted(stale)}"
        raise DocsError(f"stop reasons: {why}")
    codes = sorted({*EXIT_CODES.values(), USAGE})
    if set(codes) != set(EXIT_MEANINGS):
        raise DocsError(f"exit codes in the code {codes} differ from those described {sorted(EXIT_MEANINGS)}")
    parts = ["### Exit codes\n", "| exit | meaning | stop reasons |", "| --- | --- | --- |"]
    for code in codes:
        names = ", ".join(f"`{r}`" for r in StopReason if EXIT_CODES[str(r)] == code)
        parts.append(f"| {code} | {EXIT_MEANINGS[code]} | {names} |")
    parts += ["", "### Stop reasons\n", "| stop reason | exit | when |", "| --- | --- | --- |"]
    parts += [f"| `{r}` | {EXIT_CODES[str(r)]} | {STOP_DESCRIPTIONS[str(r)]} |" for r in StopReason]
    return "\n".join(parts) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "agent-file": agent_file_reference,
    "trace-events": trace_events_reference,
    "exit-codes": exit_codes_reference,
}


def render(markdown: str) -> str:
    """``markdown`` with every generated section filled in."""

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise DocsError(f"no generator for <!-- generated: {name} -->")
        return GENERATORS[name]()

    return MARKER.sub(fill, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # the MkDocs hook
    return render(markdown)
