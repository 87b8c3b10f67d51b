"""``Host``: the authority and its chokepoint (``HostCore``) plus the run entry points a user
calls. The runners import ``HostCore``; ``Host`` is where the two meet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

import anyio

from tether.chokepoint._authority import HostCore
from tether.core.types import GateOutcome
from tether.errors import ConfigError
from tether.policy._trusted import TrustedContext
from tether.runners._loop import AgentLoop, resume_run
from tether.runners._workflow import Workflow, run_workflow
from tether.runs._values import Agent, RunResult

__all__ = ["GateOutcome", "Host"]


class Host(HostCore):
    """Authority for runs: tools, policy, memory, traces. Build it in application code."""

    # -- runs -----------------------------------------------------------------------------

    async def run(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult:
        """Run an agent to exactly one stop reason. Raises only for host misconfiguration."""
        await self.ensure_started()
        return await AgentLoop(self, agent, objective, context).run()

    async def resume(self, agent: Agent, run_id: str) -> RunResult:
        """Continue a run paused for approval or an answer, or stopped on a transient failure
        (its checkpoint is in ``approvals.store``). Raises ``ApprovalError`` (``no_store``,
        ``unknown_run``, ``run_finished``)."""
        await self.ensure_started()
        return await resume_run(self, agent, run_id)

    async def run_workflow(
        self, workflow: Workflow, objective: str, *, context: TrustedContext, run_id: str | None = None
    ) -> RunResult:
        """Run a workflow; ``run_id`` continues an earlier run of it (recorded effects replay,
        approved proposals are found; see ``tether.runners._workflow.run_workflow``)."""
        await self.ensure_started()
        return await run_workflow(self, workflow, objective, context, run_id=run_id)

    async def rollback(
        self,
        failed: RunResult,
        workflow: Workflow,
        objective: str,
        *,
        context: TrustedContext,
        disable_sources: Iterable[str] = (),
        disable_memory: Iterable[str] = (),
    ) -> RunResult:
        """Agent → workflow: keep the failed trace, disable what it implicated (tool sources and
        memory subjects, for this host from now on), run the workflow."""
        self.disabled_sources.update(disable_sources)
        self.disabled_memory.update(disable_memory)
        await self.ensure_started()
        rollback = {
            "failed_run_id": failed.run_id,
            "stop_reason": str(failed.stop_reason),
            "trace": str(failed.trace_path) if failed.trace_path else None,
            "disabled_sources": sorted(self.disabled_sources),
            "disabled_memory": sorted(self.disabled_memory),
        }
        # What the failed run did happened, its child runs' effects included (a subagent's
        # payment): the workflow's bounds count it (a deposit paid before it failed is not paid
        # again unreviewed).
        done = failed.history()
        return await run_workflow(self, workflow, objective, context, rollback_from=rollback, inherited=done)

    def run_sync(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult:
        """Blocking wrapper for scripts: starts, runs and closes the host in one event loop."""
        return self._blocking(partial(self.run, agent, objective, context=context))

    def resume_sync(self, agent: Agent, run_id: str) -> RunResult:
        """Blocking wrapper of ``resume`` for scripts: starts, resumes and closes the host."""
        return self._blocking(partial(self.resume, agent, run_id))

    def _blocking(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop here: the blocking wrapper starts one
        else:  # a notebook's loop, or an async function's: one cannot be started inside it
            raise ConfigError(
                "run_sync/resume_sync start an event loop, and one is already running here (a "
                "Jupyter notebook, an async function): await host.run(...) / host.resume(...) instead"
            )

        async def main() -> RunResult:
            try:
                return await run()
            finally:
                await self.aclose()

        return anyio.run(main)
