"""A durable run recovered after its process died replays its recorded turns (helper ``attack12a``).

A turn's record carried the observations and calls it appended to the run state, not what its
child runs did: a subagent's payment is folded into the parent's inherited history
(``run_child``), and a replayed turn left it out. A parent whose helper paid 100 of a 200
deposit, recovered after its process died, then paid the whole 200 unreviewed: 300 paid. A
replayed turn now restores the inherited history as it was after the turn.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_provenance_round6 import CTX, HOTEL_IBAN, RULES, TRUST, World
from test_provenance_round11b import PAY_ONCE, _obeys, _pay

from tether import Agent, Host
from tether.context import ContextConfig, Subagent
from tether.policy._approvals import Approvals
from tether.policy._provenance_rules import ProvenancePolicy, ProvenanceRules, make_labeler
from tether.policy._sqlite_store import SqliteApprovalStore
from tether.testing import call
from tether.trace._events import TraceEvent

pytest.importorskip("dbos")

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2")]


class ProcessDied(BaseException):
    """The worker's process dies: no layer may catch it and turn it into a result."""


class DiesAfterThirdAnswer:
    """A trace sink that kills the 'process' once the parent's third model answer is recorded
    (after the turn in which its helper ran), once."""

    def __init__(self) -> None:
        self.run_id = ""
        self.answers = 0
        self.armed = True

    def write(self, event: TraceEvent) -> None:
        if self.armed and event.run_id == self.run_id and str(event.kind) == "model_response":
            self.answers += 1
            if self.answers == 3:
                self.armed = False
                raise ProcessDied()

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def worker() -> Iterator[Any]:
    from tether.durable import Worker, WorkerConfig

    folder = tempfile.mkdtemp(prefix="tether-durable-")
    started = Worker(WorkerConfig(f"sqlite:///{folder}", executor_id="replay12a", init=True))
    thread = threading.Thread(target=started.start)  # DBOS launches outside any event loop
    thread.start()
    thread.join()
    yield started
    started.stop()


async def _recovered(tmp_path: Path, parent_pays: float) -> tuple[World, str]:
    """A durable parent reads the listing, its helper pays 100, the process dies; recovered,
    the parent pays ``parent_pays``. What the tools received, and how the run ended."""
    from dbos import DBOS, SetWorkflowID

    from tether.durable._runtime import context_to_json, register_app, tether_run

    world = World(account=HOTEL_IBAN)
    dies = DiesAfterThirdAnswer()
    host = Host(
        policy=ProvenancePolicy(ProvenanceRules(RULES, TRUST)),
        on_denied="continue",
        labeler=make_labeler(TRUST),
        approvals=Approvals(SqliteApprovalStore(tmp_path / "approvals.db")),
        trace_dir=tmp_path / "traces",
        trace_sinks=[dies],
    )
    host.add_tools(world.get_hotels, world.pay_deposit)
    helper = Subagent("helper", "Pays a deposit.", lambda: Agent("helper", _obeys(_pay(100.0))))
    ask = call("helper", task="Pay part of the Grand Hotel's deposit.")
    model = _obeys(call("get_hotels", city="Paris"), ask, _pay(parent_pays), answer="Booked.")
    agent = Agent("act", model, context=ContextConfig(subagents=[helper]))
    run_id = dies.run_id = host.new_run_id()
    register_app(f"replay12a:{run_id}", lambda *a, **k: (host, agent))
    request = {
        "op": "start",
        "run_id": run_id,
        "app": f"replay12a:{run_id}",
        "objective": PAY_ONCE,
        "context": context_to_json(CTX),
    }
    with SetWorkflowID(run_id):
        handle = await DBOS.start_workflow_async(tether_run, request)
    with pytest.raises(ProcessDied):
        await handle.get_result()
    assert [a["amount"] for _, a in world.received] == [100.0]  # the helper's, before it died
    handle = await DBOS.resume_workflow_async(run_id)  # another worker recovers it
    out = await handle.get_result()
    return world, str(out["stop_reason"])


async def test_a_recovered_parent_counts_what_its_helper_paid_before_the_process_died(
    tmp_path: Path, worker: Any
) -> None:
    world, stop = await _recovered(tmp_path, 200.0)
    assert [a["amount"] for _, a in world.received] == [100.0] and stop == "approval_required"


async def test_a_recovered_parent_still_pays_what_its_helper_left(tmp_path: Path, worker: Any) -> None:
    world, stop = await _recovered(tmp_path, 100.0)
    assert [a["amount"] for _, a in world.received] == [100.0, 100.0] and stop == "accepted"
