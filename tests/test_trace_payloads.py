"""Every trace event has a declared payload, and every emitter keeps to it.

Two nets: ``test_every_literal_emit_in_src_uses_only_declared_fields`` reads the source and
checks the field names of each ``emit(EventKind.X, …)`` call; the few emitters whose fields are
built at run time (listed in ``DYNAMIC_SITES``) are checked by strict tracers, which the whole
suite uses (tests/conftest.py), against names, required fields and types.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tether.trace import JsonlSink, MemorySink, Tracer
from tether.trace._events import RESERVED, EventKind, TraceEvent, TraceSchemaError
from tether.trace._payloads import FIELDS, PAYLOADS

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Calls that hand a payload to a tracer, by the name of the function called.
EMITTERS = {"emit", "_emit"}
# MCP client gates send one kind each through a callback, with fields they always add.
GATES = {
    "mcp/_elicitation.py": (EventKind.MCP_ELICITATION, {"server", "outcome"}),
    "mcp/_sampling.py": (EventKind.MCP_SAMPLING, {"server", "outcome", "reason"}),
    "mcp/_roots.py": (EventKind.MCP_ROOTS, {"server"}),
}
# Where the kind or the field names are only known at run time (strict tracers check these).
DYNAMIC_SITES = {
    "chokepoint/_effects.py": "on_event forwards the ledger's events, adding proposal_id",
    "runners/_loop.py": "the context engine's events, ModelResponse.meta and composed.trace_fields()",
    "mcp/_source.py": "pending events replayed at bind time; server description fields",
    "mcp/_calling.py": "a task's status fields as the server reports them (mcp_task)",
    "mcp/_opening.py": "the sandbox plan's description of a confined launch (mcp_sandbox)",
    "chokepoint/_authority.py": "server description fields",
    "runners/_workflow.py": "the rollback's description of the failed run",
    "runners/_scope.py": "the runner's description of itself in run_started (agent and model, or workflow)",
    "chokepoint/_calls.py": "what cleaning found in a result (tool_observation's cleaned)",
    "mcp/_results.py": "the one home of mcp_result_rejected: each caller's detail of what it refused",
    "mcp/_listing.py": "a blocked tool's digests (sha256, pinned_sha256), where its definition changed",
}


def _kinds(node: ast.expr) -> list[EventKind] | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "EventKind":
        return [EventKind[node.attr]]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [EventKind(node.value)]
    if isinstance(node, ast.IfExp):
        a, b = _kinds(node.body), _kinds(node.orelse)
        return a + b if a is not None and b is not None else None
    return None


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _sites() -> tuple[list[tuple[str, int, EventKind, set[str]]], set[str]]:
    """(file, line, kind, field names) for every emit whose kind is in the source; and the
    files with an emit whose kind or fields are computed."""
    found: list[tuple[str, int, EventKind, set[str]]] = []
    dynamic: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = _callee(node)
            names = {k.arg for k in node.keywords if k.arg is not None}
            spread = any(k.arg is None for k in node.keywords)
            if name in EMITTERS and node.args:
                kinds = _kinds(node.args[0])
                if kinds is None or spread:
                    dynamic.add(rel)
                for kind in kinds or ():
                    found.append((rel, node.lineno, kind, names))
            elif rel in GATES and name in ("_event", "_refuse", "_on_event"):
                kind, implied = GATES[rel]
                if name == "_on_event" and node.args and isinstance(node.args[0], ast.Dict):
                    # A ``**data`` inside is the helper's own (``_event``/``_refuse``), whose
                    # call sites are read here too.
                    names = names | {k.value for k in node.args[0].keys if isinstance(k, ast.Constant)}
                found.append((rel, node.lineno, kind, names | implied))
    return found, dynamic


def test_every_event_kind_has_a_payload_and_none_claims_the_events_own_fields() -> None:
    assert set(PAYLOADS) == set(EventKind)
    for kind, fields in FIELDS.items():
        assert not fields & RESERVED, kind


def test_every_literal_emit_in_src_uses_only_declared_fields() -> None:
    found, _ = _sites()
    assert len(found) > 60  # the scan really reads the emitters
    wrong = [f"{f}:{line} {kind}: {sorted(names - FIELDS[kind])}" for f, line, kind, names in found]
    wrong = [w for w, (_, _, kind, names) in zip(wrong, found, strict=True) if names - FIELDS[kind]]
    assert wrong == []


def test_emitters_with_run_time_fields_are_the_known_ones() -> None:
    # A new emitter whose fields the scan cannot read must be looked at (and exercised by a
    # test, where the strict tracer checks it) before it joins this list.
    _, dynamic = _sites()
    assert dynamic == set(DYNAMIC_SITES)


def test_the_suite_runs_every_tracer_strict() -> None:
    assert Tracer("run-1", []).strict is True


def test_a_strict_tracer_refuses_an_undeclared_field_a_missing_one_and_a_wrong_type() -> None:
    t = Tracer("run-1", [], strict=True)
    t.emit(EventKind.POLICY_ALLOWED, call_id="c1", tool="read", rule="allowlist")  # the legitimate event
    with pytest.raises(TraceSchemaError, match="undeclared fields \\['note'\\]"):
        t.emit(EventKind.POLICY_ALLOWED, call_id="c1", tool="read", rule="allowlist", note="x")
    with pytest.raises(TraceSchemaError, match="rule: Field required"):
        t.emit(EventKind.POLICY_ALLOWED, call_id="c1", tool="read")
    with pytest.raises(TraceSchemaError, match="steps: Input should be a valid integer"):
        t.emit(EventKind.STOP, reason="accepted", steps="3")
    assert [e.kind for e in t.events] == [EventKind.POLICY_ALLOWED]


def test_a_payload_can_never_overwrite_the_events_own_run_id(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lax = Tracer("run-1", [JsonlSink(path), MemorySink()], strict=False)
    lax.emit(EventKind.TOOL_ERROR, tool="read", error="x", run_id="run-evil", seq=99, note="kept")
    lax.close()
    line = json.loads(path.read_text(encoding="utf-8"))
    assert (line["run_id"], line["seq"], line["kind"]) == ("run-1", 1, "tool_error")
    assert (line["payload_run_id"], line["payload_seq"], line["note"]) == ("run-evil", 99, "kept")
    assert lax.problems == ["tool_error event: undeclared fields ['note', 'run_id', 'seq']"]
    with pytest.raises(TraceSchemaError):
        Tracer("run-1", [], strict=True).emit(EventKind.TOOL_ERROR, tool="read", error="x", run_id="run-evil")
    with pytest.raises(TraceSchemaError, match="overwrite"):
        TraceEvent("run-1", 1, "now", EventKind.STOP, {"run_id": "run-evil"})


def test_an_event_read_back_from_its_line_is_the_same_event(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    t = Tracer("run-1", [JsonlSink(path)], strict=True)
    t.emit(EventKind.STOP, reason="accepted", steps=2)
    t.close()
    (line,) = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert TraceEvent.from_json(line) == t.events[0]
