"""``tether mcp review|approve|run|resume|pauses``: the MCP host from a config file (X1–X5)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from tether.cli._commands._options import (
    add_actions,
    add_answer,
    add_json,
    add_model_options,
    add_output_options,
    add_script,
    answer_of,
)
from tether.cli._commands._progress import show_text
from tether.clisupport.approvals_db import default_db
from tether.clisupport.output import EXIT_CODES, EXIT_HELP, USAGE, emit_json, fail, outcome, safe, terminal
from tether.errors import ConfigError, TetherError

T = TypeVar("T")


def register(sub: Any) -> None:
    _, msub = add_actions(
        sub,
        "mcp",
        dest="mcp_command",
        help="the MCP host: review/approve servers, run a question over them, resume paused questions",
        description="MCP servers are declared in a TOML/YAML config file (see the guide 'Add MCP servers "
        "safely').",
    )
    r = msub.add_parser("review", help="show every tool's full definition and flag suspicious text")
    r.add_argument("name", help="server id from the config")
    _common(r, handler=_review, shared=True)
    a = msub.add_parser("approve", help="pin the sha256 of each tool's current definition")
    a.add_argument("name", help="server id from the config")
    a.add_argument("--tool", action="append", help="approve only this tool (repeatable)")
    a.add_argument(
        "--accept-flagged", action="append", default=[], metavar="TOOL", help="pin this flagged tool anyway"
    )
    a.add_argument("--by", help="who approves (default: the login name)")
    a.add_argument("--expect", metavar="DIGEST", help="the review digest shown by `review`")
    _common(a, handler=_approve, shared=True)
    _add_run(msub)
    _add_resume(msub)
    ps = msub.add_parser("pauses", help="list elicitations waiting for a person")
    _common(ps, handler=_pauses, shared=True)


def _add_run(msub: Any) -> None:
    run = msub.add_parser(
        "run",
        help="run a question over the configured servers with a model",
        description="Run QUESTION over every configured server with the model named by --model "
        "(a chat-completions server), or with a scripted stand-in when you say so (--model "
        "scripted:STEPS.yaml, --script or --call; the stand-in obeys 'CALL <tool>' found in tool "
        f"results unless --no-obey, to test containment). {EXIT_HELP}",
    )
    run.add_argument("question")
    add_script(run)
    run.add_argument(
        "--no-obey", action="store_true", help="the stand-in does not obey instructions found in results"
    )
    run.add_argument(
        "--ask",
        choices=("auto", "never", "console"),
        default="auto",
        help="who answers elicitations: console (a person), never (pause), auto (console if a terminal)",
    )
    run.add_argument(
        "--sampler",
        choices=("none", "model"),
        default="none",
        help="servers' sampling requests: none (refused) or model (answered by --model, a real model)",
    )
    run.add_argument(
        "--consent",
        choices=("no", "yes", "console"),
        default="no",
        help="sampling consent: no; yes (each exact prompt is printed to stderr, then allowed); "
        "console (asked)",
    )
    run.add_argument(
        "--db",
        type=Path,
        default=None,
        help="approval store: a call needing approval or a question nobody answers checkpoints the run; "
        "`tether resume RUN --db` continues it with the same model and servers",
    )
    add_model_options(run)
    add_output_options(run)
    run.add_argument("--config", type=Path, required=True, help="MCP host config (TOML or YAML)")
    run.set_defaults(handler=run_mcp, agent=None)


def _add_resume(msub: Any) -> None:
    res = msub.add_parser("resume", help="answer a paused elicitation and re-run the paused call")
    res.add_argument("pause_id")
    add_answer(res, by="the login name")
    res.add_argument("--db", type=Path, help="the run's approval store (for the resume hint)")
    res.add_argument(
        "--answer-only",
        action="store_true",
        help="store the validated answer without re-running the call (a checkpointed run then "
        "continues with `tether resume RUN`)",
    )
    _common(res, handler=_resume, shared=False)


def _common(p: argparse.ArgumentParser, *, handler: Any, shared: bool) -> None:
    """--config or --agent, --json, and (``shared``) a deployment's --db."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="MCP host config (TOML or YAML)")
    where.add_argument("--agent", type=Path, help="an agent file: its mcp section (a config path or inline)")
    add_json(p)
    if shared:
        p.add_argument(
            "--db",
            metavar="URL",
            help="a deployment's storage URL (postgresql://… or sqlite:///dir): its shared pins and pauses,"
            " as durable workers use them, instead of the config's files",
        )
    p.set_defaults(handler=handler)


def _deployment(url: str | None) -> Any:
    """A deployment's stores (--db), whose pins and pauses replace the config's files; or None."""
    if not url:
        return None
    from tether.durable._deploy import check_stores
    from tether.stores._url import open_stores

    check_stores(url)  # one line in seconds (exit 6: down), and nothing created by mistake
    return open_stores(url)


def _load(args: argparse.Namespace) -> Any:
    """The MCP config of --config, or of the agent file's mcp section (--agent)."""
    from tether.mcp._config import load_config

    if getattr(args, "agent", None) is not None:
        from tether.agents._file import load_agent_file, mcp_config

        af = load_agent_file(args.agent)
        if af.spec.mcp is None:
            raise ConfigError(f"{args.agent}: the agent file has no mcp section")
        return mcp_config(af)
    return load_config(args.config)


def _fail(args: argparse.Namespace, err: Exception | str) -> int:
    """Exit 1 (nothing ran), or the code the error carries (6: a deployment's server is down)."""
    code = int(getattr(err, "exit", USAGE))
    return fail(f"tether mcp {args.mcp_command}", err, as_json=args.json, code=code)


def _with_pins(args: argparse.Namespace, work: Callable[[Any, Any], Awaitable[T]]) -> T | int:
    """``work(config, pins)``: the pins of --db, else None (the config's own); or the exit code."""
    import anyio

    shared = None
    try:
        config = _load(args)
        shared = _deployment(args.db)
        return anyio.run(work, config, shared.pins if shared is not None else None)
    except TetherError as err:
        return _fail(args, err)
    finally:
        if shared is not None:
            shared.close()


def _review(args: argparse.Namespace) -> int:
    from tether.mcp._approve import review_server

    review = _with_pins(args, lambda config, pins: review_server(config, args.name, pins=pins))
    if isinstance(review, int):
        return review
    if not args.json:
        print(terminal(f"server {review.server}: {json.dumps(review.launch, ensure_ascii=False)}"))
        print(f"review digest: {review.digest}  (approve with --expect to pin exactly this listing)")
        for tr in review.tools:
            c = tr.check
            flag = "  FLAGGED" if tr.flagged else ""
            why = f": {c.why}" if c.why else ""
            print(terminal(f"\n== {c.tool}  [{c.status}{why}]{flag}\nsha256: {c.sha256}"))
            # Full and untruncated; ascii() makes hidden characters visible instead of invisible.
            print(json.dumps(c.definition, indent=2, sort_keys=True, ensure_ascii=True))
            for f in tr.findings:
                print(terminal(f"  ! {f.kind} in {f.where}: {f.detail}"))
        if review.instructions:
            print("\n== server instructions (shown for review, never sent to the model)")
            print(safe(review.instructions))
            for f in review.instruction_findings:
                print(terminal(f"  ! {f.kind} in {f.where}: {f.detail}"))
        print("\n== summary")
        print("\n".join(safe(line) for line in review.summary()))
        print(terminal(f"to pin exactly this listing: {_approve_command(args, review.digest)}"))
    else:
        emit_json({"ok": True, **review.to_json()}, exit=0)
    return 0


def _approve_command(args: argparse.Namespace, digest: str) -> str:
    """The complete ``tether mcp approve`` command for what ``review`` showed: the digest is printed
    again after the summary, where the reader ends up, not only above every tool's definition."""
    import shlex

    source = ["--agent", str(args.agent)] if getattr(args, "agent", None) else ["--config", str(args.config)]
    db = ["--db", str(args.db)] if getattr(args, "db", None) else []
    return shlex.join(["tether", "mcp", "approve", args.name, *source, *db, "--expect", digest])


def _approve(args: argparse.Namespace) -> int:
    from tether.mcp._approve import approve_server

    done = _with_pins(
        args,
        lambda config, pins: approve_server(
            config,
            args.name,
            actor=args.by,
            accept_flagged=set(args.accept_flagged),
            only=set(args.tool) if args.tool else None,
            expect=args.expect,
            pins=pins,
        ),
    )
    if isinstance(done, int):
        return done
    review, pinned, skipped = done
    already = [
        t.check.tool for t in review.tools if t.check.status == "pinned" and t.check.tool not in skipped
    ]
    lines = [
        *(f"pinned   {args.name}__{name}" for name in pinned),
        *(f"unchanged {args.name}__{name}" for name in already if name not in pinned),
        *(f"NOT pinned {args.name}__{name}: {why}" for name, why in skipped.items()),
    ]
    payload = {"ok": True, "server": args.name, "pinned": pinned, "unchanged": already, "skipped": skipped}
    return outcome(payload, "\n".join(lines) if lines else None, as_json=args.json)


def build(af: Any, args: argparse.Namespace, *, ask: str, consent: str) -> Any:
    """The agent of ``af`` as this command line runs it: --db, who answers, the stream shown."""
    from tether.agents._build import build_agent

    return build_agent(
        af,
        approvals_db=getattr(args, "db", None),
        responder=responder_for(ask),
        consent=consent_for(consent),
        on_delta=None if args.json else show_text,
    )


def responder_for(mode: str) -> Any:
    """Who answers elicitations: a person at this console, or nobody (the question pauses)."""
    from tether.mcp._elicitation import ConsoleResponder

    if mode == "console" or (mode == "auto" and sys.stdin.isatty()):
        return ConsoleResponder()
    return None


def consent_for(mode: str) -> Any:
    """The sampling consent hook: it always sees (and shows) the exact prompt first."""
    if mode == "no":
        return None

    def hook(prompt: Any) -> bool:
        print(
            f"MCP server '{prompt.server}' asks the model (max_tokens {prompt.max_tokens}):", file=sys.stderr
        )
        if prompt.system_prompt:
            dropped = "[server's system prompt: DROPPED, never sent]"
            print(f"  {dropped} {safe(prompt.system_prompt)}", file=sys.stderr)
        for role, text in prompt.messages:
            print(f"  [{role}] {safe(text)}", file=sys.stderr)
        if mode == "yes":
            return True
        return input("allow this sampling request? (yes/no): ").strip().lower() == "yes"

    return hook


def _script(args: argparse.Namespace) -> list[Any]:
    """The scripted stand-in's steps from --script and --call, as plain data (each checked)."""
    from tether.mcphost._runner import ScriptStep

    steps: list[Any] = []
    if getattr(args, "script", None):
        steps.extend(ScriptStep.read(args.script))
    for name, raw in getattr(args, "call", None) or []:
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError as err:
            why = f"--call {name}: the arguments are not JSON ({err.msg} at character {err.pos})"
            raise ValueError(why) from None
        if not isinstance(arguments, dict):
            why = f"--call {name}: the arguments must be a JSON object, got {type(arguments).__name__}"
            raise ValueError(why)
        steps.append({"call": name, "arguments": arguments})
    return steps


NEEDS_MODEL = (
    "tether mcp run needs a model: --model NAME --base-url URL (a chat-completions server), or a "
    "scripted stand-in named as such: --model scripted:STEPS.yaml, --script STEPS.yaml or --call TOOL JSON"
)


def run_mcp(args: argparse.Namespace) -> int:
    """``tether mcp run`` and ``tether run --config``: a question over the configured servers."""
    import hashlib

    import yaml

    from tether.agents._file import mcp_agent
    from tether.cli._commands.run import drive, model_overrides
    from tether.mcp._config import load_config
    from tether.mcphost._runner import INSTRUCTIONS

    try:
        config = load_config(args.config)
        steps = _script(args)
        overrides = model_overrides(args)
        model = {k: v for k, v in overrides.items() if v is not None and k != "limits"}
        model["limits"] = {k: v for k, v in overrides["limits"].items() if v is not None}
        if "name" not in model:
            if not steps:
                return _fail_run(args, NEEDS_MODEL)
            # The stand-in's steps are written down so `tether resume` replays the same stand-in.
            body = yaml.safe_dump(steps, sort_keys=True)
            folder = config.path(config.host.trace_dir) / "scripts"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{hashlib.sha256(body.encode()).hexdigest()[:16]}.yaml"
            path.write_text(body, encoding="utf-8")
            model["name"] = f"scripted:{path.resolve()}"
            model["obey_injected"] = not getattr(args, "no_obey", False)
        elif steps:
            why = "--script/--call are a scripted stand-in's steps: they do not go with --model"
            return _fail_run(args, why)
        sampler = getattr(args, "sampler", "none")
        af = mcp_agent(
            args.config,
            model=model,
            instructions=INSTRUCTIONS,
            tenant=config.host.tenant,
            user=config.host.user,
            sampling=sampler,
            consent=getattr(args, "consent", "no"),
            trace_dir=str(config.path(config.host.trace_dir)),
        )
        for s in config.servers:
            if s.sampling.enabled and sampler == "none":
                print(
                    f"note: server {s.name} may ask for samples, but no sampling model is set: its "
                    "requests will be refused (pass --sampler model to answer them with --model)",
                    file=sys.stderr,
                )
        built = build(af, args, ask=getattr(args, "ask", "never"), consent=getattr(args, "consent", "no"))
    except (TetherError, ValueError, OSError) as err:
        return _fail_run(args, err)
    for s in config.servers:
        shown = " ".join(s.argv()) if s.transport == "stdio" else s.url
        print(f"launching {s.name}: {safe(shown)}", file=sys.stderr)
    return drive(built, args.question, args, **{"config": str(args.config)})


def _fail_run(args: argparse.Namespace, err: Exception | str) -> int:
    command = "tether mcp run" if getattr(args, "mcp_command", None) else "tether run"
    return fail(command, err, as_json=args.json)


def _resume(args: argparse.Namespace) -> int:
    import getpass

    import anyio

    from tether.cli._commands._audit import CliAudit, cli_actor
    from tether.mcphost._runner import answer_pause, resume_pause
    from tether.sql._database import blocking

    try:
        config = _load(args)
        action, content = answer_of(args)
        actor = args.by or getpass.getuser()
        # Checked and audited as every entry point's answers (``mcp._answers.answer_question``).
        audit, audited_as = CliAudit(), cli_actor(actor)
        if args.answer_only:
            pause = blocking(
                answer_pause,
                config,
                args.pause_id,
                action,
                content,
                actor=actor,
                audit=audit,
                audited_as=audited_as,
            )
            hint = f"tether resume {pause.run_id} --db {_db_of(args, pause.run_id)}"
            payload = {"pause": pause.id, "run_id": pause.run_id, "action": action, "resume": hint}
            line = f"{pause.id}: answered ({action}); continue the run with: {hint}"
            return outcome(payload, line, as_json=args.json)
        out = anyio.run(
            lambda: resume_pause(
                config, args.pause_id, action, content, actor=actor, audit=audit, audited_as=audited_as
            )
        )
    except (TetherError, ValueError) as err:  # nothing ran: a mistyped id, an answer that does not fit
        return _fail(args, err)
    code = EXIT_CODES[_RERUN_STOP[out["status"]]]
    summary = {**out, "error": None if code == 0 else out["status"]}
    text = f"{out['tool']}: {out['status']}\n{safe(out['result'])}\ntrace: {out['trace']}"
    return outcome(summary, text, as_json=args.json, exit=code)


# The stop reason of a paused call run again, by its status.
_RERUN_STOP = {"ok": "accepted", "error": "dependency_unavailable", "denied": "policy_denied"}


def _db_of(args: argparse.Namespace, run_id: str) -> str:
    """The approval store a paused run lives in: --db, else the default one if the run is there."""
    from tether.agents._record import record_path

    if getattr(args, "db", None) is not None:
        return str(args.db)
    if record_path(default_db(), run_id).exists():
        return str(default_db())
    return "DB  (the --db the run was started with)"


def _pauses(args: argparse.Namespace) -> int:
    from tether.cli._commands._pauses import pause_listing
    from tether.mcp._pauses import PauseStore
    from tether.sql._database import blocking

    try:
        config = _load(args)
        shared = _deployment(args.db)
    except TetherError as err:
        return _fail(args, err)
    store = shared.pauses if shared is not None else PauseStore(config.path(config.host.state))
    try:
        listing = pause_listing(blocking(store.pending))
    finally:
        (shared or store).close()
    text = "\n".join(safe(f"{r['id']}  {r['tool']}  asks: {r['message']}") for r in listing["pauses"])
    return outcome(listing, text or "no pending elicitations", as_json=args.json)
