"""The app bench/distributed.py's workers serve: the OpenAI-compatible backend against the local
fake chat server (``$BENCH_MODEL_URL``), which asks for ``lookup`` until the question's
``steps=N`` results are in, then answers."""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import Field

from tether import Agent, Host, Limits, Policy, tool
from tether.models._openai import OpenAICompatible
from tether.policy import Approvals

APP = "distributed_app:build"
RESULT = "r" * 512


@tool
async def lookup(key: Annotated[str, Field(description="The key to look up, e.g. 'k3'.")]) -> str:
    """Look up one key and return its record."""
    return RESULT


def agent() -> Agent:
    model = OpenAICompatible("fake-model", base_url=os.environ["BENCH_MODEL_URL"], stream=False)
    limits = Limits(max_steps=100, llm_calls=100, llm_calls_hard=101, deadline_s=300)
    return Agent("Look things up, then answer.", model, limits=limits)


def build(url: str) -> tuple[Host, Agent]:
    """A durable worker's factory: the deployment's approval store, no trace files."""
    from tether.durable import stores_for

    host = Host(policy=Policy(allow={"lookup"}), approvals=Approvals(stores_for(url).approvals))
    host.add_tools(lookup)
    return host, agent()


def build_local() -> tuple[Host, Agent]:
    """The same host and agent for the in-process loop (the baseline)."""
    host = Host(policy=Policy(allow={"lookup"}))
    host.add_tools(lookup)
    return host, agent()
