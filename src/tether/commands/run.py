"""``tether run "QUESTION" --scenario maintenance [--model NAME --base-url URL]``.

Runs a reference scenario's agent on a question. Without ``--model`` the scenario's
deterministic stand-in answers (no network); with it, any chat-completions server does.
The host — policy, tenant, MCP server, memory, traces — is the scenario's, unchanged.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SCENARIOS = ("maintenance",)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a scenario's agent on a question (scripted model, or a real one with --model)",
        description="Run a scenario's agent on QUESTION. Exit codes as for `tether lab`: 0 accepted, "
        "2 policy_denied, 3 invalid_handoff, 4 budget/steps/deadline/repetition, 6 dependency "
        "unavailable, 7 model/internal error; 1 for a configuration error.",
    )
    p.add_argument("question")
    p.add_argument("--scenario", choices=SCENARIOS, default="maintenance")
    p.add_argument("--model", help="model name; without it the scenario's scripted stand-in answers")
    p.add_argument("--base-url", help="chat-completions base URL (default $OPENAI_BASE_URL or OpenAI)")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (the key itself is never printed or traced)",
    )
    p.add_argument("--no-stream", action="store_true", help="ask for whole responses instead of a stream")
    p.add_argument(
        "--reasoning",
        choices=("drop", "keep", "since_last_user"),
        help="resend reasoning_content: default per model name (see README)",
    )
    p.add_argument("--prices", type=Path, help="JSON price table: {model: {input, output, cached_input}}")
    p.add_argument("--max-llm-calls", type=int, help="LLM-call budget for this invocation")
    p.add_argument("--max-tokens", type=int, help="token budget (prompt + completion, all calls)")
    p.add_argument("--max-cost", type=float, help="cost budget in USD (the model must be priced)")
    p.add_argument("--deadline", type=float, help="deadline in seconds")
    p.add_argument("--rate", type=float, help="requests per second to the model backend (shared bucket)")
    p.add_argument("--inject", action="store_true", help="let the ERP server inject an instruction")
    p.add_argument(
        "--out", type=Path, default=Path("tether-output"), help="output folder (default ./tether-output)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument(
        "--config", type=Path, help="MCP host config (TOML/YAML): run over its servers (see `tether mcp`)"
    )
    p.add_argument("--script", type=Path, help="with --config and no --model: scripted stand-in steps")
    p.add_argument(
        "--call",
        nargs=2,
        action="append",
        default=[],
        metavar=("TOOL", "JSON"),
        help="with --config: a scripted call",
    )
    p.set_defaults(handler=run)


def _limits(args: argparse.Namespace, base: Any) -> Any:
    from dataclasses import replace

    changes: dict[str, Any] = {}
    if args.max_llm_calls is not None:
        changes["llm_calls"] = args.max_llm_calls
        changes["llm_calls_hard"] = max(base.llm_calls_hard, args.max_llm_calls + 2)
    if args.max_tokens is not None:
        changes["max_tokens"] = args.max_tokens
    if args.max_cost is not None:
        changes["max_cost_usd"] = args.max_cost
    if args.deadline is not None:
        changes["deadline_s"] = args.deadline
    return replace(base, **changes)


def _backend(args: argparse.Namespace) -> Any:
    import sys

    from tether.models.openai import OpenAICompatible
    from tether.models.pricing import DEFAULT_PRICES, load_prices

    prices = {**DEFAULT_PRICES, **load_prices(args.prices)} if args.prices else DEFAULT_PRICES
    bucket = None
    if args.rate is not None:
        from tether.ratelimit import shared_bucket

        bucket = shared_bucket(f"model:{args.base_url or 'default'}", args.rate, max(1.0, args.rate))

    def show(kind: str, piece: str) -> None:
        if kind == "text":
            sys.stderr.write(piece)
            sys.stderr.flush()

    return OpenAICompatible(
        args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        stream=not args.no_stream,
        reasoning=args.reasoning,
        prices=prices,
        rate_limit=bucket,
        on_delta=None if args.json else show,
    )


def run(args: argparse.Namespace) -> int:
    import os
    import sys
    from dataclasses import replace

    import anyio

    from tether.commands._output import emit_json
    from tether.errors import ConfigError
    from tether.scenarios.maintenance import lab

    if args.config is not None:
        # The configured MCP servers instead of the scenario's host (tether.commands.mcp owns it).
        from tether.commands.mcp import run_with_config
        from tether.stop import Limits

        try:
            backend = _backend(args) if args.model else None
            limits = _limits(args, Limits())
        except (ConfigError, ValueError) as err:
            print(f"tether run: {err}", file=sys.stderr)
            return 1
        key = os.environ.get(args.api_key_env) if args.model else None
        try:
            return run_with_config(args, model=backend, secrets=(key,) if key else (), limits=limits)
        finally:
            if backend is not None:
                anyio.run(backend.aclose)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    agent = lab.make_agent()
    secrets: list[str] = []
    backend = None
    try:
        if args.model:
            backend = _backend(args)
            if args.max_cost is not None and backend.price is None:
                raise ConfigError(f"--max-cost needs a price for {args.model}: pass --prices FILE")
            agent = replace(agent, model=backend)
            secrets = [v for v in (os.environ.get(args.api_key_env),) if v]
        agent = replace(agent, limits=_limits(args, agent.limits))
    except (ConfigError, ValueError) as err:
        print(f"tether run: {err}", file=sys.stderr)
        return 1

    mem_path = out / "memory" / "run.db"
    mem_path.parent.mkdir(parents=True, exist_ok=True)

    async def main() -> Any:
        host = lab.make_host(out, inject=args.inject, memory=lab.memory_store(mem_path))
        host.secrets = frozenset(secrets)  # the tracer redacts the key should anything echo it
        try:
            async with host:
                return await host.run(agent, args.question, context=lab.trusted_context())
        finally:
            if backend is not None:
                await backend.aclose()

    result = anyio.run(main)
    code = lab.exit_code(result.stop_reason)
    summary = {"scenario": args.scenario, "model": agent.model.name, **result.summary()}
    if args.json:
        emit_json(summary)
    else:
        if args.model:
            sys.stderr.write("\n")
        print(f"stop_reason: {result.stop_reason}")
        for key in ("answer", "detail", "llm_calls", "tokens", "cost_usd", "trace"):
            if summary.get(key) not in (None, ""):
                print(f"{key}: {summary[key]}")
    return code
