"""A plain (sync) tool's ``timeout_s`` is honest: at the timeout the call ends as a timed-out tool
error the model reads and the run goes on; the thread runs on, its result is discarded (traced as
late while the run is open), an effect's ledger entry is left of unknown outcome (reconciled or
resolved by a person, never repeated blindly), and hung threads are bounded per tool.

No wall-clock assertions: the tools block on ``threading.Event``s the test releases; a safety
timer releases them only so that a broken build ends (its assertions then fail)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import Field

from tether import Agent, Effect, Host, Policy, StopReason, TrustedContext, tool
from tether.errors import ApprovalError, UpstreamError
from tether.policy import Approvals, SqliteApprovalStore
from tether.policy._store import LedgerStatus
from tether.testing import ScriptedModel, call
from tether.tools._threads import LATE_LIMIT, running_late

pytestmark = pytest.mark.anyio

CTX = TrustedContext(tenant="t1", roles=frozenset({"r"}))
SAFETY_S = 5.0  # only a broken build waits this long (the run waiting for the thread), then fails
LATE = "LATE-RESULT-7f3a"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Hung:
    """A sync tool body that blocks until released, counting its calls."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.calls = 0
        self.safety = threading.Timer(SAFETY_S, self.gate.set)
        self.safety.daemon = True
        self.safety.start()

    def __call__(self) -> str:
        self.calls += 1
        self.started.set()
        self.gate.wait()
        return LATE

    def release(self) -> None:
        self.gate.set()
        self.safety.cancel()


@pytest.fixture
def hung() -> Iterator[Hung]:
    h = Hung()
    yield h
    h.release()


async def _until_done(function: object) -> None:
    """Wait (polling, no time asserted) until no call of ``function`` runs late any more."""
    while running_late(function):
        await anyio.sleep(0.01)
    await anyio.sleep(0)  # the late notice was queued before the count dropped: let it run


def _requests_text(model: ScriptedModel) -> str:
    return "\n".join(str(m.content) for r in model.requests for m in r.messages)


def _timed_out(result: Any, name: str) -> list[dict[str, Any]]:
    return [e.data for e in result.events if e.kind == "tool_observation" and e.data["tool"] == name]


async def test_a_sync_read_tool_past_its_timeout_is_a_timeout_error_and_the_run_goes_on(hung: Hung) -> None:
    @tool(timeout_s=0.2)
    def lookup(q: Annotated[str, Field(description="What to look up.")]) -> str:
        """Look something up over the network (it hangs)."""
        return hung()

    host = Host(policy=Policy(allow={"lookup"}))
    host.add_tools(lookup)
    model = ScriptedModel([call("lookup", q="x"), "done without it"])
    result = await host.run(Agent(instructions="x", model=model), "q", context=CTX)
    # The run ended while the tool still hangs: it never waited for the thread.
    assert not hung.gate.is_set() and hung.calls == 1
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "done without it"
    [obs] = _timed_out(result, "lookup")
    assert obs["is_error"] and obs["error_kind"] == "upstream_error" and obs["timed_out"] is True
    assert [c.status for c in result.calls] == ["error"]
    seen = _requests_text(model)
    assert "lookup timed out after 0.2s" in seen and "upstream_error" in seen  # as an async tool's
    hung.release()
    await _until_done(lookup.function)
    # Its late result reached nothing: not the model, not the answer, not the trace or state.
    assert LATE not in _requests_text(model) and LATE not in str(result.answer)
    assert all(LATE not in str(e.data) for e in result.events)
    assert all(LATE not in o.text for o in result.observations)
    assert result.events[-1].kind == "stop"  # nothing traced after the run's end


async def test_a_late_thread_is_traced_as_late_while_the_run_is_open(hung: Hung) -> None:
    @tool(timeout_s=0.2)
    def lookup() -> str:
        """Look something up (it hangs)."""
        return hung()

    @tool
    async def release() -> str:
        """Let the hung lookup end, and wait until it has."""
        hung.release()
        await _until_done(lookup.function)
        return "released"

    host = Host(policy=Policy(allow={"lookup", "release"}))
    host.add_tools(lookup, release)
    model = ScriptedModel([call("lookup"), call("release"), "final"])
    result = await host.run(Agent(instructions="x", model=model), "q", context=CTX)
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "final"
    late = [e.data for e in result.events if e.kind == "tool_error"]
    assert [(d["tool"], d["error"]) for d in late] == [("lookup", "late_result_discarded")]
    assert "returned after its timeout" in late[0]["message"]
    assert late[0]["call_id"] == _timed_out(result, "lookup")[0]["call_id"]
    assert LATE not in _requests_text(model) and all(LATE not in str(e.data) for e in result.events)


async def test_a_sync_write_past_its_timeout_is_of_unknown_outcome_and_never_repeated(
    tmp_path: Path, hung: Hung
) -> None:
    @tool(effect=Effect.WRITE, needs_approval=False, timeout_s=0.2)
    def send(text: Annotated[str, Field(description="The message.")]) -> str:
        """Send a message (the upstream hangs)."""
        return hung()

    store = SqliteApprovalStore(tmp_path / "approvals.db")
    host = Host(policy=Policy(allow={"send"}), approvals=Approvals(store))
    host.add_tools(send)
    model = ScriptedModel([call("send", text="hi"), "sent or not, I stop"])
    result = await host.run(Agent(instructions="x", model=model), "q", context=CTX)
    assert result.stop_reason is StopReason.ACCEPTED and not hung.gate.is_set()
    assert "send timed out after 0.2s" in _requests_text(model)
    [entry] = await store.ledger_for_run(result.run_id)
    # The ledger does not claim the call done (nor not done): it is left to be reconciled.
    assert entry.status is LedgerStatus.RECONCILING and entry.result is None
    assert "effect_recorded" not in [str(e.kind) for e in result.events]
    hung.release()
    await _until_done(send.function)
    assert (await store.ledger_entry(entry.key)).status is LedgerStatus.RECONCILING  # late: still unknown
    # A resume that reaches this call again (same key) neither repeats it nor guesses: with no
    # reconciler, a person must resolve it.
    approvals = Approvals(store)
    with pytest.raises(ApprovalError) as unknown:
        await approvals.perform(entry.key, tool="send", arguments={"text": "hi"}, call=_must_not_run)
    assert unknown.value.reason == "outcome_unknown"
    assert (await store.ledger_entry(entry.key)).status is LedgerStatus.ESCALATED
    assert hung.calls == 1


async def test_a_declared_reconciler_decides_a_timed_out_write(tmp_path: Path, hung: Hung) -> None:
    @tool(effect=Effect.WRITE, needs_approval=False, timeout_s=0.2)
    def send(text: Annotated[str, Field(description="The message.")]) -> str:
        """Send a message (the upstream hangs)."""
        return hung()

    store = SqliteApprovalStore(tmp_path / "approvals.db")
    host = Host(policy=Policy(allow={"send"}), approvals=Approvals(store))
    host.add_tools(send)
    model = ScriptedModel([call("send", text="hi"), "stop"])
    result = await host.run(Agent(instructions="x", model=model), "q", context=CTX)
    [entry] = await store.ledger_for_run(result.run_id)
    hung.release()
    await _until_done(send.function)
    asked: list[str] = []

    def reconcile(key: str) -> dict[str, Any]:
        asked.append(key)
        return {"text": "it was sent", "is_error": False}

    approvals = Approvals(store, reconcilers={"send": reconcile})
    outcome = await approvals.perform(entry.key, tool="send", arguments={"text": "hi"}, call=_must_not_run)
    assert outcome.reconciled and asked == [entry.key] and hung.calls == 1


async def test_a_sync_tool_that_ends_in_time_is_unchanged(tmp_path: Path) -> None:
    @tool(timeout_s=30)
    def lookup() -> str:
        """Look something up."""
        return "found it"

    @tool(effect=Effect.WRITE, needs_approval=False, timeout_s=30)
    def send(text: Annotated[str, Field(description="The message.")]) -> str:
        """Send a message."""
        return f"sent {text}"

    store = SqliteApprovalStore(tmp_path / "approvals.db")
    host = Host(policy=Policy(allow={"lookup", "send"}), approvals=Approvals(store))
    host.add_tools(lookup, send)
    model = ScriptedModel([call("lookup"), call("send", text="hi"), "ok"])
    result = await host.run(Agent(instructions="x", model=model), "q", context=CTX)
    assert result.stop_reason is StopReason.ACCEPTED
    assert [c.status for c in result.calls] == ["ok", "ok"]
    observed = [e.data for e in result.events if e.kind == "tool_observation"]
    assert [d["is_error"] for d in observed] == [False, False] and all("timed_out" not in d for d in observed)
    seen = _requests_text(model)
    assert "found it" in seen and "sent hi" in seen and "timed out" not in seen
    [entry] = await store.ledger_for_run(result.run_id)
    assert entry.status is LedgerStatus.DONE


async def test_hung_threads_are_bounded_per_tool_and_a_cancelled_call_does_not_wait(hung: Hung) -> None:
    started: list[int] = []

    @tool(timeout_s=0.05)
    def stuck(n: Annotated[int, Field(description="Which call.")]) -> str:
        """Hangs."""
        started.append(n)
        return hung()

    for n in range(LATE_LIMIT):
        with pytest.raises(UpstreamError, match="timed out after") as err:
            await stuck.invoke({"n": n})
        assert err.value.meta == {"timed_out": True, "outcome_unknown": True}
    # The next call is refused before it starts: no thread piles up behind the hung ones.
    with pytest.raises(UpstreamError, match="was not started: 8 earlier calls"):
        await stuck.invoke({"n": 99})
    assert 99 not in started and running_late(stuck.function) == LATE_LIMIT
    # An unrelated sync tool still gets a thread at once (the worker pool is not held).
    fine = tool(lambda: "fine", name="fine", description="Fine.")
    assert (await fine.invoke({})).text == "fine"
    hung.release()
    await _until_done(stuck.function)
    # Cancelled from outside (Ctrl-C, the run's deadline): the caller stops waiting at once.
    again = Hung()
    never = tool(lambda: again(), name="never", description="Hangs.", timeout_s=60)
    async with anyio.create_task_group() as tg:
        tg.start_soon(never.invoke, {})
        await anyio.to_thread.run_sync(again.started.wait)
        tg.cancel_scope.cancel()
    assert not again.gate.is_set()  # it returned while the thread still hangs
    again.release()
    await _until_done(never.function)


async def _must_not_run() -> dict[str, Any]:
    raise AssertionError("a call of unknown outcome ran again")
