"""The benchmark's minimal agent on peer frameworks, when they happen to be installed.

None of them is a dependency of tether. Each adapter returns ``None`` when its framework is
missing (or its API has moved on), and a session function ``run(steps)`` otherwise: the same
agent as tether's — one tool, ``lookup(key)``, returning the same 2 KB record — against the
same fake server, through each framework's own OpenAI chat-completions model class.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import Any

Session = Callable[[int], Awaitable[None]]
INSTRUCTIONS = "Look things up, then answer."


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def openai_agents(url: str, result: str) -> Session | None:
    if not _installed("agents"):
        return None
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    async def lookup(key: str) -> str:
        """Look up one key and return its 2 KB record.

        Args:
            key: The key to look up, e.g. 'k3'.
        """
        return result

    client = AsyncOpenAI(api_key="no-key", base_url=url, max_retries=0)
    model = OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
    agent: Any = Agent(name="bench", instructions=INSTRUCTIONS, tools=[lookup], model=model)

    async def run(steps: int) -> None:
        out = await Runner.run(agent, f"Collect the records. steps={steps}", max_turns=steps + 5)
        assert str(out.final_output).startswith("done after"), out.final_output

    return run


def pydantic_ai(url: str, result: str) -> Session | None:
    if not _installed("pydantic_ai"):
        return None
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(base_url=url, api_key="no-key"))
    agent: Any = Agent(model, instructions=INSTRUCTIONS)

    @agent.tool_plain
    async def lookup(key: str) -> str:
        """Look up one key and return its 2 KB record.

        Args:
            key: The key to look up, e.g. 'k3'.
        """
        return result

    async def run(steps: int) -> None:
        out = await agent.run(
            f"Collect the records. steps={steps}", usage_limits=UsageLimits(request_limit=None)
        )
        assert str(out.output).startswith("done after"), out.output

    return run


# name -> (module to detect, adapter or None when no adapter is written)
PEERS: dict[str, tuple[str, Callable[[str, str], Session | None] | None]] = {
    "openai-agents": ("agents", openai_agents),
    "pydantic-ai": ("pydantic_ai", pydantic_ai),
    "langgraph": ("langgraph", None),
    "langchain": ("langchain", None),
    "google-adk": ("google.adk", None),
}


def sessions(url: str, result: str) -> tuple[dict[str, Session], dict[str, dict[str, Any]]]:
    """Adapters that could be built, and a report line for every peer."""
    built: dict[str, Session] = {}
    report: dict[str, dict[str, Any]] = {}
    for name, (module, adapter) in PEERS.items():
        installed = _installed(module.split(".")[0])
        entry: dict[str, Any] = {"installed": installed, "measured": False}
        if installed and adapter is None:
            entry["note"] = "no adapter written for this framework"
        elif installed and adapter is not None:
            try:
                session = adapter(url, result)
            except Exception as err:  # an API that moved on: report it, never fail the benchmark
                entry["error"] = f"{type(err).__name__}: {err}"[:300]
            else:
                if session is not None:
                    built[name] = session
                    entry["measured"] = True
        report[name] = entry
    return built, report
