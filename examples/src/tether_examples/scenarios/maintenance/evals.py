"""The maintenance scenario as an evaluation subject: workflow and agent on the same cases.

A case's ``environment`` says what to build:

    server:   {inject: bool, inject_text: str, down: [read_order | read_history],
              orders: {id: {status, equipment, version, site}},
              history: {id: {events, note, version} | null}}
    memory:   [{claim, system, record, observed_at, valid_until, confidence}]  (equipment of the order)
    handoff_omit: [field, ...]   fields the agent's handoff leaves out

Cases sharing a server configuration share one ERP process (a real MCP server over stdio);
each run gets a fresh SQLite memory file seeded from the case.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether.core.handoff import resolve_from_trace
from tether.core.stop import Limits, StopReason
from tether.evals._cases import Case, CaseFileError
from tether.evals._runner import Execution, ModelFactory
from tether.host import Host
from tether.memory import MemoryPolicy, MemoryRecord, SqliteMemory
from tether.policy._trusted import Permissions, TrustedContext
from tether.runs._values import Agent, RunResult, RunState
from tether.tools._contract import Effect
from tether_examples.scenarios.maintenance import lab
from tether_examples.scenarios.maintenance.policy_model import policy_model

__all__ = ["CASES_PATH", "CONFIG_PATH", "MaintenanceScenario"]

CASES_PATH = Path(__file__).with_name("cases.yaml")
CONFIG_PATH = Path(__file__).with_name("compare.yaml")
MEMORY_SOURCES = frozenset({"erp", "erp-assets"})


class _Fixture(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OrderFixture(_Fixture):
    status: Literal["open", "closed"]
    equipment: str = Field(min_length=1)
    version: int = Field(default=1, ge=1)
    site: str = Field(min_length=1, description="owning tenant; also entered in the host's catalog")


class HistoryFixture(_Fixture):
    events: int = Field(ge=0)
    note: str
    version: int = Field(default=1, ge=1)


class ServerFixture(_Fixture):
    inject: bool = False
    inject_text: str = ""
    down: tuple[Literal["read_order", "read_history"], ...] = ()
    orders: dict[str, OrderFixture] = Field(default_factory=dict)
    history: dict[str, HistoryFixture | None] = Field(default_factory=dict)  # None removes a history

    def data(self) -> str:
        if not self.orders and not self.history:
            return ""
        return json.dumps(
            {
                "orders": {k: v.model_dump() for k, v in self.orders.items()},
                "history": {k: (v.model_dump() if v else None) for k, v in self.history.items()},
            },
            sort_keys=True,
        )


class MemoryFixture(_Fixture):
    claim: str = Field(min_length=1)
    system: str = "erp"
    record: str = ""
    observed_at: datetime
    valid_until: datetime
    confidence: Literal["authoritative", "inferred", "user_stated"] = "authoritative"


class Environment(_Fixture):
    server: ServerFixture = ServerFixture()
    memory: tuple[MemoryFixture, ...] = ()
    handoff_omit: tuple[str, ...] = ()


class CaseInput(_Fixture):
    """``order_id`` is what the requester's form supplied: empty when the question names none."""

    question: str = Field(min_length=1)
    order_id: str


def _problems(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in err.errors(include_url=False)
    )


def environment(case: Case) -> Environment:
    try:
        return Environment.model_validate(case.environment)
    except ValidationError as err:
        raise CaseFileError(f"case {case.id}: bad environment: {_problems(err)}") from None


def case_input(case: Case) -> CaseInput:
    try:
        return CaseInput.model_validate(case.input)
    except ValidationError as err:
        raise CaseFileError(f"case {case.id}: bad input: {_problems(err)}") from None


def _subject(order_id: str) -> str:
    return f"order:{order_id}:equipment"


def eval_agent(model: Any, order_id: str, *, omit: Sequence[str] = ()) -> Agent:
    """The agent design: same tools and limits as the lab, handoff and memory for ``order_id``."""

    def handoff(state: RunState, answer: str) -> dict[str, Any]:
        return lab.handoff_from_trace(state, answer, order_id, omit=tuple(omit))

    def remember(state: RunState) -> list[MemoryRecord]:
        order = state.last_data("erp__read_order")
        if not isinstance(order, dict) or "equipment" not in order:
            return []
        now = datetime.now(UTC)
        claim = str(order["equipment"])
        return [
            lab.equipment_record(
                claim, order_id=order_id, observed_at=now, valid_until=now + timedelta(days=30)
            )
        ]

    return Agent(
        instructions=lab.INSTRUCTIONS,
        model=model,
        name="order-investigator",
        limits=Limits(max_steps=8, llm_calls=10, llm_calls_hard=12, deadline_s=60),
        memory_subjects=(_subject(order_id),),
        handoff=handoff,
        resolve_evidence=resolve_from_trace,
        remember=remember,
    )


# Agent stops after which ``agent+rollback`` falls back to the workflow (L3): the failure is the
# agent's own path, and the workflow reads the same data as fields. A rejected handoff or a
# cross-boundary refusal is not retried by another design: a person decides.
ROLLBACK_ON = frozenset({StopReason.REPETITION, StopReason.MAX_STEPS, StopReason.BUDGET})


def should_roll_back(result: RunResult) -> bool:
    """The agent's own path failed: a loop, a budget, or a tool it was never given (allowlist).
    A tenant or target refusal is not the agent's path: the workflow would be refused too."""
    if result.stop_reason in ROLLBACK_ON:
        return True
    return result.stop_reason is StopReason.POLICY_DENIED and any(
        str(e.kind) == "policy_denied" and e.data.get("rule") == "allowlist" for e in result.events
    )


def chain(failed: RunResult, rollback: RunResult) -> RunResult:
    """One result for the agent run and the workflow run that replaced it (both traces kept)."""
    return RunResult(
        run_id=rollback.run_id,
        stop_reason=rollback.stop_reason,
        answer=rollback.answer,
        design="agent+rollback",
        detail=f"rolled back after {failed.stop_reason} ({failed.detail}); {rollback.detail}".rstrip("; "),
        handoff=rollback.handoff,
        trace_path=rollback.trace_path,
        steps=failed.steps + rollback.steps,
        llm_calls=failed.llm_calls + rollback.llm_calls,
        usage=failed.usage + rollback.usage,
        cost_usd=failed.cost_usd + rollback.cost_usd,
        calls=[*failed.calls, *rollback.calls],
        events=[*failed.events, *rollback.events],
        elapsed_s=failed.elapsed_s + rollback.elapsed_s,
        outputs=rollback.outputs,
        observations=[*failed.observations, *rollback.observations],
    )


class MaintenanceScenario:
    """S1 for ``tether compare``: ``workflow``, ``agent``, and ``agent+rollback`` (the agent, rolled
    back to the workflow with the order's memory disabled when it stops on a policy denial,
    repetition or budget)."""

    name = "maintenance"
    designs: tuple[str, ...] = ("workflow", "agent", "agent+rollback")

    def __init__(self, out: Path) -> None:
        self.out = out
        self._key: str | None = None
        self._host: Host | None = None
        self._log: Path | None = None
        self._n = 0

    def check(self, case: Case, designs: Sequence[str]) -> None:
        environment(case)
        case_input(case)
        for design in designs:
            if design not in self.designs:
                raise CaseFileError(f"unknown design {design!r}; choose from {', '.join(self.designs)}")
            case.expect.stop_reasons(design)

    def environment_key(self, case: Case) -> str:
        return environment(case).server.model_dump_json()

    async def _host_for(self, case: Case) -> Host:
        key = self.environment_key(case)
        if self._host is not None and key == self._key:
            return self._host
        await self.aclose()
        server = environment(case).server
        self._n += 1
        folder = self.out / f"env-{self._n:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        host = lab.make_host(
            folder,
            inject=server.inject,
            down=",".join(server.down),
            inject_text=server.inject_text,
            data=server.data(),
            # The case author (trusted) states who owns a fixture order; the catalog learns it here.
            extra_orders={k: v.site for k, v in server.orders.items()},
        )
        host.trace_dir = self.out / "traces"
        await host.start()
        self._host, self._key, self._log = host, key, folder / "erp-calls.jsonl"
        return host

    def _server_log(self) -> list[str]:
        if self._log is None or not self._log.exists():
            return []
        return [json.loads(line)["tool"] for line in self._log.read_text().splitlines() if line.strip()]

    async def _memory(self, case: Case, design: str, repeat: int) -> tuple[SqliteMemory, list[str]]:
        """A fresh store holding the case's memories; returns it and the claims a read shows."""
        env, inp = environment(case), case_input(case)
        path = self.out / "memory" / f"{case.id}-{design}-{repeat}.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        policy = MemoryPolicy(approved_sources=MEMORY_SOURCES)
        for i, m in enumerate(env.memory):
            # Seed with a clock just after observation, so once-valid (now expired) records exist.
            seed_clock = m.observed_at + timedelta(seconds=1 + i)
            seeder = SqliteMemory(path, policy=policy, clock=lambda t=seed_clock: t)  # type: ignore[misc]
            record = lab.equipment_record(
                m.claim,
                order_id=inp.order_id,
                observed_at=m.observed_at,
                valid_until=m.valid_until,
                tenant=case.context.tenant,
                system=m.system,
                record=m.record,
                confidence=m.confidence,
            )
            await seeder.propose(record, actor="case-fixture")
        store = SqliteMemory(path, policy=policy)
        shown = await store.read(
            _subject(inp.order_id),
            scope=f"tenant:{case.context.tenant}",
            roles=set(case.context.roles),
            now=datetime.now(UTC),
        )
        return store, [f"memory {r.origin}: {r.record.claim}" for r in shown.records]

    async def execute(
        self, case: Case, design: str, *, repeat: int, model_factory: ModelFactory | None
    ) -> Execution:
        env, inp = environment(case), case_input(case)
        host = await self._host_for(case)
        ctx = TrustedContext(
            tenant=case.context.tenant,
            roles=frozenset(case.context.roles),
            user=case.context.user,
            permissions=Permissions(read=frozenset({"orders", "history"}), write=frozenset()),
        )
        before = len(self._server_log())
        faults = [f"down:{t}" for t in env.server.down]
        faults += ["inject"] if env.server.inject else []
        faults += [f"handoff_omit:{f}" for f in env.handoff_omit]
        shown: list[str] = []
        parts: tuple[RunResult, ...] = ()
        if design == "workflow":
            host.memory = None
            result = await host.run_workflow(lab.workflow(inp.order_id), inp.question, context=ctx)
        elif design in ("agent", "agent+rollback"):
            store, shown = await self._memory(case, design, repeat)
            faults += ["memory"] if env.memory else []
            host.memory = store
            host.disabled_memory = set()  # a rollback disables memory for its own run only
            model = model_factory() if model_factory else policy_model()
            result = await host.run(
                eval_agent(model, inp.order_id, omit=env.handoff_omit), inp.question, context=ctx
            )
            if design == "agent+rollback" and should_roll_back(result):
                safe = await host.rollback(
                    result,
                    lab.workflow(inp.order_id),
                    inp.question,
                    context=ctx,
                    disable_memory=[_subject(inp.order_id)],
                )
                host.disabled_memory = set()
                parts = (result, safe)
                result = chain(result, safe)
        else:
            raise CaseFileError(f"unknown design {design!r}; choose from {', '.join(self.designs)}")
        reached = self._server_log()[before:]
        return Execution(
            result=result,
            specs=host.offered(),
            context_extra=shown,
            effects={s.name: s.effect for s in host.offered()} | {"export_secrets": Effect.SEND},
            server_calls=reached,
            faults=faults,
            parts=parts,
        )

    async def aclose(self) -> None:
        host, self._host, self._key = self._host, None, None
        if host is not None:
            await host.aclose()
