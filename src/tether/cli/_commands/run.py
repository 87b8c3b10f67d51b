"""``tether run "OBJECTIVE" --agent agent.yaml``: run your own agent, described in a file (options
given here override its model settings). Also ``--config MCP.yaml --model NAME`` (a config's
servers and a model) and ``--scenario NAME`` (an installed scenario's ``run`` part).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tether.cli._commands._options import (
    add_model_options,
    add_out,
    add_output_options,
    add_scenario,
    add_script,
)
from tether.cli._commands._progress import ProgressSink, progress_wanted, show_text, write_results
from tether.clisupport.output import (
    EXIT_HELP,
    block_fix,
    emit_json,
    fail,
    model_fallbacks,
    model_hints,
    print_run,
    run_payload,
)
from tether.clisupport.telemetry import add_otel_flags, apply_otel_flags
from tether.errors import ConfigError

NEEDS_AGENT = (
    "tether run needs an agent: --agent FILE (documentation: 'Write an agent file'), or --config MCP.yaml "
    "with --model NAME --base-url URL; a scripted stand-in only when named: --model scripted:STEPS.yaml; "
    "the reference scenario: tether demo maintenance"
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run your agent (from a file) on an objective",
        description=f"Run the agent described in --agent FILE (YAML or TOML) on OBJECTIVE. {EXIT_HELP}",
    )
    p.add_argument("question", metavar="OBJECTIVE")
    p.add_argument("--agent", type=Path, help="agent file (YAML or TOML): model, tools, MCP servers, policy")
    p.add_argument("--config", type=Path, help="an MCP host config: run --model over its servers only")
    add_scenario(p, "an installed scenario's own agent (maintenance: as tether demo maintenance)")
    p.add_argument("--db", type=Path, help="approval store: side effects and questions pause the run there")
    add_model_options(p)
    add_output_options(p)
    add_script(p, "with --config: ")
    p.add_argument(
        "--inject", action="store_true", help="--scenario only: the ERP server injects an instruction"
    )
    add_out(p, "--scenario only: output folder")
    add_otel_flags(p)
    p.set_defaults(handler=run)


def model_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The model settings given on the command line (``None``: keep the file's)."""
    from dataclasses import asdict

    from tether.models._pricing import load_prices

    prices = None
    if getattr(args, "prices", None) is not None:
        prices = {model: asdict(price) for model, price in load_prices(args.prices).items()}
    return {
        "name": args.model,
        "base_url": args.base_url,
        "provider": getattr(args, "provider", None),
        "api_key_env": args.api_key_env,
        "streaming": False if args.no_stream else None,
        "reasoning": args.reasoning,
        "rate": args.rate,
        "prices": prices,
        "limits": _limits(args),
    }


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "llm_calls": args.max_llm_calls,
        "max_tokens": args.max_tokens,
        "max_cost_usd": args.max_cost,
        "deadline_s": args.deadline,
    }


def run(args: argparse.Namespace) -> int:
    apply_otel_flags(args)
    if args.scenario is not None:
        return run_scenario(args)
    if args.agent is None and args.config is not None:
        from tether.cli._commands.mcp import run_mcp

        return run_mcp(args)
    if args.agent is None:
        return fail("tether run", NEEDS_AGENT, as_json=args.json)
    if args.script or args.call:
        why = "--script/--call apply to --config runs; name a script as --model scripted:FILE"
        return fail("tether run", why, as_json=args.json)

    from tether.agents._file import load_agent_file, with_overrides
    from tether.cli._commands.mcp import build

    try:
        af = with_overrides(load_agent_file(args.agent), **model_overrides(args))
        mcp = af.spec.mcp
        built = build(af, args, ask=mcp.ask if mcp else "never", consent=mcp.consent if mcp else "no")
    except (ConfigError, ValueError) as err:
        return fail("tether run", err, as_json=args.json)
    return drive(built, args.question, args, agent=str(af.path))


def drive(built: Any, objective: str, args: argparse.Namespace, **extra: Any) -> int:
    """Run a built agent once and report it (progress on a terminal, the outcome, exit code)."""
    import anyio

    from tether.agents._record import RecordSink
    from tether.runners._interrupt import on_signals_stop

    host = built.host
    if progress_wanted(args.json):
        host.extra_sinks.append(ProgressSink())
    if built.approvals_db is not None:
        host.extra_sinks.append(RecordSink(built.approvals_db, built.agent_file))

    async def main() -> Any:
        try:
            async with host:
                return await host.run(built.agent, objective, context=built.context)
        finally:
            await built.aclose()

    result = anyio.run(on_signals_stop, main)
    if not args.json and getattr(built.agent.model, "stream", False):
        sys.stderr.write("\n")
    trace_results = getattr(args, "trace_results", False) or built.agent_file.spec.trace.results
    return report(
        result,
        host,
        args,
        db=built.approvals_db,
        trace_results=trace_results,
        model=built.agent.model.name,
        backend=built.agent.model,
        **extra,
    )


def report(
    result: Any,
    host: Any,
    args: argparse.Namespace,
    *,
    db: Path | None,
    trace_results: bool = False,
    tools: Any = None,
    backend: Any = None,
    **extra: Any,
) -> int:
    """Print a finished (or paused) run and return its exit code. ``backend``: the run's model,
    for the hints of a ``model_error`` (the URL, the key variable, streaming)."""
    down = unavailable_servers(host)
    servers = [s.name for s in host.sources if callable(getattr(s, "describe", None))]
    config, agent = getattr(args, "config", None), getattr(args, "agent", None)
    where = _where(config, agent)
    payload = run_payload(result, unavailable_servers=down, mcp_servers=servers, where=where, **extra)
    payload["unavailable_servers"] = down
    hints = model_hints(str(result.stop_reason), str(result.detail or ""), backend)
    if hints:
        payload["hints"] = hints
    if switched := model_fallbacks(backend):
        payload["model_fallbacks"] = switched
    payload.update(mcp_facts(result, host, tools))
    for entry in payload.get("blocked", ()):
        if fix := block_fix(entry, where):
            entry["fix"] = fix
    # What the call lines would hide: an unconfined server, a declined question, a cleaned result.
    warnings = [f"warning: server {s.name}: {w}" for s in host.sources for w in getattr(s, "warnings", ())]
    payload["mcp_notes"] = [*warnings, *payload.pop("notes", [])]
    if trace_results:
        path = write_results(result, host.secrets)
        payload["results_file"] = str(path) if path else None
    nxt = next_steps(result, db, config=config, agent=agent)
    if nxt:
        payload["next"] = nxt
        payload["resume"] = nxt[-1]
    if args.json:
        emit_json(payload, exit=payload["exit"])
    else:
        shown = getattr(args, "show_results", False)
        print_run(payload, show_results=[(o.tool, o.text) for o in result.observations] if shown else None)
        if nxt:
            print("to continue:")
            for i, line in enumerate(nxt, 1):
                print(f"  {i}. {line}")
    return int(payload["exit"])


def mcp_facts(result: Any, host: Any, tools: Any) -> dict[str, Any]:
    """For runs over MCP servers: the tools offered per server, what the host blocked, launches."""
    servers = [s for s in host.sources if callable(getattr(s, "describe", None))]
    if not servers:
        return {}
    from tether.mcphost._runner import blocked_entries

    offered = [spec.name for spec in host.offered(tools)]
    blocked = blocked_entries(result.events)
    # A tool the config never offers (not in its server's tools) is not news when it is unapproved.
    offers = {s.name: getattr(s, "allow_tools", None) for s in servers}
    blocked = [b for b in blocked if not _never_offered(b, offers)]
    return {
        "offered_tools": {s.name: [t for t in offered if t.startswith(s.name + "__")] for s in servers},
        "blocked": blocked,
        "servers": [{"server": s.name, **s.describe()} for s in servers],
    }


def _never_offered(entry: dict[str, Any], offers: dict[str, Any]) -> bool:
    if entry.get("kind") != "mcp_capability_blocked" or entry.get("status") != "new":
        return False
    server, _, remote = str(entry.get("tool", "")).partition("__")
    allowed = offers.get(str(entry.get("server") or server))
    return allowed is not None and remote not in allowed


def unavailable_servers(host: Any) -> dict[str, str]:
    """Each server that is gone, with why: for the person, its cause in full (stderr, hints)."""
    return {
        s.name: getattr(s, "unavailable_detail", None) or s.unavailable
        for s in host.sources
        if isinstance(getattr(s, "unavailable", None), str)
    }


def next_steps(
    result: Any, db: Path | None, *, config: Path | None = None, agent: Path | None = None
) -> list[str]:
    """Complete commands that continue a paused run: decide or answer first, then resume (an
    interrupted run: resume it)."""
    if str(result.stop_reason) == "interrupted" and db is not None:
        return [f"tether resume {result.run_id} --db {db}"]
    if str(result.stop_reason) != "approval_required" or db is None:
        return []
    steps: list[str] = []
    # The run's own requests, and what its child runs (a subagent's) wait for: it waits with them.
    for proposal in dict.fromkeys([*_requested(result), *result.pending_proposals]):
        if _pending(db, proposal):  # a resumed run's events hold proposals decided before it
            steps.append(f"tether approvals approve {proposal} --db {db}")
    where = _where(config, agent)
    for o in result.observations:
        if o.meta.get("pause") and not o.meta.get("child_run"):  # a child run is resumed with this one
            steps.append(f"tether mcp resume {o.meta['pause']} {where} --answer-only --answer '{{...}}'")
    steps.append(f"tether resume {result.run_id} --db {db}")
    return steps


def _where(config: Path | None, agent: Path | None) -> str:
    """The option that names the run's servers, in the commands a person is told to run."""
    return f"--config {config}" if config else f"--agent {agent}" if agent else "--config MCP.yaml"


def _requested(result: Any) -> list[str]:
    return [
        str(e.data["proposal_id"])
        for e in result.events
        if str(e.kind) == "approval_requested" and e.data.get("proposal_id")
    ]


def _pending(db: Path, proposal_id: str) -> bool:
    """Whether a proposal still waits for a decision (an unreadable store: assume it does)."""
    from tether.policy import SqliteApprovalStore
    from tether.sql._database import blocking

    if not Path(db).exists():
        return True
    store = SqliteApprovalStore(db)
    try:
        found = blocking(store.get_proposal, proposal_id)
    finally:
        store.close()
    return found is None or str(found.status) == "pending"


def run_scenario(args: argparse.Namespace) -> int:
    """An installed scenario's own host and agent (S1: maintenance), with an optional real model."""
    import os
    from dataclasses import replace

    import anyio

    from tether.agents._spec import LimitsSpec
    from tether.clisupport.scenarios import ScenarioUnavailable, resolve, scenario_with

    try:
        lab = resolve(scenario_with("run", args.scenario)[1])
    except ScenarioUnavailable as err:
        return fail("tether run", err, as_json=args.json)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    agent = lab.make_agent()
    secrets: list[str] = []
    backend = None
    try:
        if args.model:
            from tether.agents._file import parse_agent

            overrides = {k: v for k, v in model_overrides(args).items() if v is not None and k != "limits"}
            spec = {"instructions": lab.INSTRUCTIONS, "model": overrides}
            af = parse_agent(spec, base_dir=Path.cwd())
            from tether.agents._build import make_model

            backend = make_model(af, on_delta=None if args.json else show_text)
            if args.max_cost is not None and getattr(backend, "price", 1) is None:
                raise ConfigError(f"--max-cost needs a price for {args.model}: pass --prices FILE")
            agent = replace(agent, model=backend)
            secrets = [v for v in (os.environ.get(af.spec.model.key_env),) if v]
        limits = LimitsSpec(**_limits(args))
        changes = {k: v for k, v in limits.model_dump().items() if v is not None}
        if "llm_calls" in changes:
            changes["llm_calls_hard"] = max(agent.limits.llm_calls_hard, changes["llm_calls"] + 2)
        agent = replace(agent, limits=replace(agent.limits, **changes))
    except (ConfigError, ValueError) as err:
        return fail("tether run", err, as_json=args.json)

    mem_path = out / "memory" / "run.db"
    mem_path.parent.mkdir(parents=True, exist_ok=True)
    host = lab.make_host(out, inject=args.inject, memory=lab.memory_store(mem_path))
    host.secrets = frozenset(secrets)  # the tracer redacts the key should anything echo it

    from tether.runners._interrupt import on_signals_stop

    async def main() -> Any:
        try:
            async with host:
                return await host.run(agent, args.question, context=lab.trusted_context())
        finally:
            if backend is not None and hasattr(backend, "aclose"):
                await backend.aclose()

    result = anyio.run(on_signals_stop, main)
    if args.model and not args.json:
        sys.stderr.write("\n")
    return report(result, host, args, db=None, scenario=args.scenario, model=agent.model.name)


def demo_main(argv: list[str], *, scenario: str) -> int:
    """``tether demo maintenance "QUESTION" [--model …]``: a scenario's agent on a question."""
    from tether.cli._main import Parser, parse

    parser = Parser(prog=f"tether demo {scenario}")
    register(parser.add_subparsers(dest="command"))  # the `run` command's own options
    args = parse(parser, ["run", *argv, "--scenario", scenario])
    return args if isinstance(args, int) else run(args)
