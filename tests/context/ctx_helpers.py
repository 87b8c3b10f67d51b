"""Small builders shared by the context-engine tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tether import Agent, Host, Limits, Policy, TrustedContext, tool
from tether.context import ContextConfig
from tether.models._base import Model

NOW = datetime(2026, 3, 2, 10, 30, 45, tzinfo=UTC)


def clock() -> datetime:
    return NOW


@tool(max_result_chars=400_000)
def fetch(url: Annotated[str, Field(description="The page to fetch.")]) -> str:
    """Fetch a page (test double: the url decides the size)."""
    size = int(url.rsplit("/", 1)[-1]) if url.rsplit("/", 1)[-1].isdigit() else 500
    body = (f"Page {url}. " + "lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    return body + f" [source: {url}]"


def host_with(tmp_path: Path, *tools: Any, allow: set[str] | None = None) -> Host:
    host = Host(
        policy=Policy(allow=allow if allow is not None else {t.name for t in tools}),
        trace_dir=tmp_path / "traces",
        clock=clock,
    )
    host.add_tools(*tools)
    return host


def agent_with(model: Model, context: ContextConfig | None, **limits: Any) -> Agent:
    return Agent(
        instructions="You research. Answer from tool results only.",
        model=model,
        context=context,
        limits=Limits(
            **{"max_steps": 20, "llm_calls": 25, "llm_calls_hard": 30, "deadline_s": None, **limits}
        ),
    )


CTX = TrustedContext(tenant="t1")
