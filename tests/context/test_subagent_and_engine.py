"""C6 (subagent isolation) and the engine's public API used on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from ctx_helpers import CTX, NOW, agent_with, clock, fetch, host_with
from pydantic import Field

from tether import tool
from tether.context import ContextConfig, ContextEngine, StatusConfig, Subagent, run_subtask
from tether.core.messages import ToolMessage, UserMessage
from tether.runs._values import RunState
from tether.testing import ScriptedModel, call
from tether.trace._tracer import read_trace


@pytest.mark.spec("C6")
@pytest.mark.anyio
async def test_subtask_runs_in_its_own_context_and_only_its_conclusion_returns(tmp_path: Path) -> None:
    host = host_with(tmp_path, fetch, allow={"fetch", "delegate"})
    conclusion = "handle_callback in src/payment/callbacks.py; two other call sites."

    def child() -> Any:
        model = ScriptedModel([call("fetch", url="https://code.example/60000"), conclusion])
        return agent_with(model, None)

    children: list[Any] = []

    @tool(max_result_chars=5_000)
    async def delegate(
        task: Annotated[str, Field(description="A self-contained subtask.")],
    ) -> dict[str, Any]:
        """Run a bulky search in an isolated subagent and return its conclusion."""
        result = await run_subtask(host, child(), task, context=CTX)
        children.append(result)
        return result.as_tool_result()

    host.add_tools(delegate)
    parent_model = ScriptedModel([call("delegate", task="Find the payment callback handler."), "Found it."])
    result = await host.run(agent_with(parent_model, None), "Where are payment callbacks?", context=CTX)
    assert result.ok
    last = parent_model.requests[-1]
    text = "\n".join(m.content or "" for m in last.messages)
    assert conclusion in text and "lorem ipsum" not in text  # the 60 KB page stayed in the child
    (sub,) = children
    assert sub.ok and sub.run_id != result.run_id and sub.trace_path is not None
    child_events = read_trace(sub.trace_path)
    assert any(e["kind"] == "tool_observation" and e["chars"] >= 60_000 for e in child_events)

    # with the parent's tracer, the link is a trace event a reader can follow
    tracer, _ = host.new_tracer("parent-run")
    linked = await run_subtask(host, child(), "Find it again.", context=CTX, parent=tracer, max_chars=20)
    event = tracer.events[-1]
    assert str(event.kind) == "subagent_finished" and event.data["child_run_id"] == linked.run_id
    assert Path(event.data["child_trace"]).exists()
    assert len(linked.conclusion) <= 20 and linked.conclusion.endswith("…")


@pytest.mark.spec("C6")
@pytest.mark.anyio
async def test_configured_subagent_is_a_tool_whose_child_trace_is_linked_and_depth_is_bounded(
    tmp_path: Path,
) -> None:
    host = host_with(tmp_path, fetch)

    def searcher() -> Any:
        model = ScriptedModel([call("fetch", url="https://code.example/30000"), "callbacks live in pay.py"])
        return agent_with(model, None)

    sub = Subagent(
        "code_search", "Search the codebase in an isolated context; returns a conclusion.", searcher
    )
    parent_model = ScriptedModel([call("code_search", task="Find the payment callbacks."), "In pay.py."])
    result = await host.run(
        agent_with(parent_model, ContextConfig(subagents=(sub,))), "Where are callbacks?", context=CTX
    )
    assert result.ok
    (link,) = [e.data for e in result.events if str(e.kind) == "subagent_finished"]
    assert link["stop_reason"] == "accepted" and Path(link["child_trace"]).exists()
    assert link["child_run_id"] in link["child_trace"]
    last = parent_model.requests[-1]
    assert "callbacks live in pay.py" in "".join(m.content or "" for m in last.messages)
    assert "lorem ipsum" not in "".join(m.content or "" for m in last.messages)

    from tether.context._subagent import MAX_DEPTH, _depth
    from tether.errors import ToolError

    token = _depth.set(MAX_DEPTH)
    try:
        with pytest.raises(ToolError, match="nest at most"):
            await run_subtask(host, searcher(), "again", context=CTX)
    finally:
        _depth.reset(token)


@pytest.mark.spec("C1")
@pytest.mark.anyio
async def test_engine_build_is_usable_without_the_loop(tmp_path: Path) -> None:
    engine = ContextEngine(
        ContextConfig(
            status=StatusConfig(
                strategy="replace", todo=False, sections=[lambda s: f"steps so far: {s.steps}"]
            )
        ),
        instructions="rules",
        tools=[fetch.spec],
        clock=clock,
    )
    state = RunState(run_id="r", objective="q", context=CTX, started=0.0, started_at=NOW)
    state.trajectory.extend(engine.opening("q"))
    budget = "<budget>llm calls 1/16</budget>"
    request = await engine.build(state, tail=[UserMessage(budget, "harness")])
    assert [m.kind for m in request.messages] == ["system", "user", "user", "user"]
    assert request.messages[-2].content.startswith("<agent_status>")  # the status, then the caller's tail
    assert request.messages[-1].content == budget
    assert engine.last is not None and engine.last.prefix.reuse is None
    again = await engine.build(state)
    assert "steps so far: 0" in (again.messages[-1].content or "")
    assert not any(isinstance(m, ToolMessage) for m in again.messages)
