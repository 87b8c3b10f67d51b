"""``tether mcp review|approve|run|resume|pauses``: the MCP host from a config file (X1–X5)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT = {
    "accepted": 0,
    "policy_denied": 2,
    "approval_denied": 2,
    "invalid_handoff": 3,
    "budget": 4,
    "deadline": 4,
    "max_steps": 4,
    "repetition": 4,
    "approval_required": 5,
    "dependency_unavailable": 6,
    "model_error": 7,
    "internal_error": 7,
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="the MCP host: review/approve servers, run a question over them, resume paused questions",
        description="MCP servers are declared in a TOML/YAML config file (see README, 'MCP host').",
    )
    msub = p.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)

    r = msub.add_parser("review", help="show every tool's full definition and flag suspicious text")
    r.add_argument("name", help="server id from the config")
    _common(r)
    r.set_defaults(handler=_review)

    a = msub.add_parser("approve", help="pin the sha256 of each tool's current definition")
    a.add_argument("name", help="server id from the config")
    a.add_argument("--tool", action="append", default=None, help="approve only this tool (repeatable)")
    a.add_argument(
        "--accept-flagged", action="append", default=[], metavar="TOOL", help="pin this flagged tool anyway"
    )
    a.add_argument("--by", default=None, help="who approves (default: the login name)")
    a.add_argument("--expect", default=None, metavar="DIGEST", help="the review digest shown by `review`")
    _common(a)
    a.set_defaults(handler=_approve)

    run = msub.add_parser(
        "run",
        help="run a question over the configured servers with a scripted stand-in model",
        description="The stand-in makes the scripted calls, obeys 'CALL <tool>' found in tool results "
        "(to test containment), then answers with what it observed. Exit codes: 0 accepted, 2 policy "
        "denied, 4 budget/steps/deadline/repetition, 5 paused for a person, 6 dependency unavailable, "
        "7 error.",
    )
    run.add_argument("question")
    run.add_argument(
        "--script", type=Path, help="YAML/JSON list of steps: {call, arguments} | [..] | {final}"
    )
    run.add_argument(
        "--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON"), help="a scripted call"
    )
    run.add_argument("--no-obey", action="store_true", help="do not obey instructions found in results")
    run.add_argument(
        "--ask", choices=("auto", "never", "console"), default="auto",
        help="who answers elicitations: console (a person), never (pause), auto (console if a terminal)",
    )  # fmt: skip
    run.add_argument(
        "--sampler", choices=("none", "standin"), default="none",
        help="model that answers servers' sampling requests (default none: refused)",
    )  # fmt: skip
    run.add_argument(
        "--consent", choices=("no", "yes", "console"), default="no",
        help="sampling consent: no; yes (each exact prompt is printed to stderr, then allowed); "
        "console (asked)",
    )  # fmt: skip
    run.add_argument(
        "--db", type=Path, default=None,
        help="approval store: a question nobody answers checkpoints the run, `tether resume RUN --db` "
        "continues it (the config path is recorded beside the store)",
    )  # fmt: skip
    _common(run)
    run.set_defaults(handler=_run)

    res = msub.add_parser("resume", help="answer a paused elicitation and re-run the paused call")
    res.add_argument("pause_id")
    group = res.add_mutually_exclusive_group(required=True)
    group.add_argument("--answer", help="the answer as a JSON object (validated against the question)")
    group.add_argument("--decline", action="store_true")
    group.add_argument("--cancel", action="store_true")
    res.add_argument("--by", default=None, help="who answers (default: the login name)")
    res.add_argument(
        "--answer-only",
        action="store_true",
        help="store the validated answer without re-running the call (a checkpointed run then "
        "continues with `tether resume RUN`)",
    )
    _common(res)
    res.set_defaults(handler=_resume)

    ps = msub.add_parser("pauses", help="list elicitations waiting for a person")
    _common(ps)
    ps.set_defaults(handler=_pauses)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, required=True, help="MCP host config (TOML or YAML)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _load(args: argparse.Namespace) -> Any:
    from tether.mcp.config import load_config

    return load_config(args.config)


def _safe(text: object) -> str:
    """Server-written text for a terminal: line breaks kept, every other control or format
    character escaped (no ANSI sequences, no carriage-return overwrites, no bidi tricks)."""
    from tether.trace.sanitize import sanitize

    return "\n".join(sanitize(line) for line in str(text).split("\n"))


def _fail(args: argparse.Namespace, err: Exception, code: int = 1) -> int:
    from tether.commands._output import emit_json

    print(f"error: {err}", file=sys.stderr)
    if args.json:
        emit_json({"ok": False, "error": type(err).__name__, "message": str(err)})
    return code


def _review(args: argparse.Namespace) -> int:
    import anyio

    from tether.commands._output import emit_json
    from tether.errors import TetherError
    from tether.mcp.approve import review_server

    try:
        config = _load(args)
        review = anyio.run(review_server, config, args.name)
    except TetherError as err:
        return _fail(args, err)
    if not args.json:
        print(f"server {review.server}: {json.dumps(review.launch, ensure_ascii=False)}")
        print(f"review digest: {review.digest}  (approve with --expect to pin exactly this listing)")
        for tr in review.tools:
            c = tr.check
            flag = "  FLAGGED" if tr.flagged else ""
            print(f"\n== {c.tool}  [{c.status}{': ' + c.why if c.why else ''}]{flag}\nsha256: {c.sha256}")
            # Full and untruncated; ascii() makes hidden characters visible instead of invisible.
            print(json.dumps(c.definition, indent=2, sort_keys=True, ensure_ascii=True))
            for f in tr.findings:
                print(f"  ! {f.kind} in {f.where}: {f.detail}")
        if review.instructions:
            print("\n== server instructions (shown for review, never sent to the model)")
            print(_safe(review.instructions))
            for f in review.instruction_findings:
                print(f"  ! {f.kind} in {f.where}: {f.detail}")
        print("\n== summary")
        print("\n".join(_safe(line) for line in review.summary()))
    else:
        emit_json({"ok": True, **review.to_json()})
    return 0


def _approve(args: argparse.Namespace) -> int:
    import anyio

    from tether.commands._output import emit_json
    from tether.errors import TetherError
    from tether.mcp.approve import approve_server

    try:
        config = _load(args)
        review, pinned, skipped = anyio.run(
            lambda: approve_server(
                config,
                args.name,
                actor=args.by,
                accept_flagged=set(args.accept_flagged),
                only=set(args.tool) if args.tool else None,
                expect=args.expect,
            )
        )
    except TetherError as err:
        return _fail(args, err)
    already = [
        t.check.tool for t in review.tools if t.check.status == "pinned" and t.check.tool not in skipped
    ]
    if not args.json:
        for name in pinned:
            print(f"pinned   {args.name}__{name}")
        for name in already:
            if name not in pinned:
                print(f"unchanged {args.name}__{name}")
        for name, why in skipped.items():
            print(f"NOT pinned {args.name}__{name}: {why}")
    else:
        emit_json(
            {"ok": True, "server": args.name, "pinned": pinned, "unchanged": already, "skipped": skipped}
        )
    return 0


def _responder(mode: str) -> Any:
    from tether.mcp.elicitation import ConsoleResponder

    if mode == "console" or (mode == "auto" and sys.stdin.isatty()):
        return ConsoleResponder()
    return None


def _consent(mode: str) -> Any:
    """The sampling consent hook: it always sees (and shows) the exact prompt first."""
    if mode == "no":
        return None

    def hook(prompt: Any) -> bool:
        print(
            f"MCP server '{prompt.server}' asks the model (max_tokens {prompt.max_tokens}):", file=sys.stderr
        )
        if prompt.system_prompt:
            dropped = "[server's system prompt: DROPPED, never sent]"
            print(f"  {dropped} {_safe(prompt.system_prompt)}", file=sys.stderr)
        for role, text in prompt.messages:
            print(f"  [{role}] {_safe(text)}", file=sys.stderr)
        if mode == "yes":
            return True
        return input("allow this sampling request? (yes/no): ").strip().lower() == "yes"

    return hook


def _script(args: argparse.Namespace) -> list[Any]:
    import yaml

    from tether.mcpapp.runner import ScriptStep

    steps: list[Any] = []
    if getattr(args, "script", None):
        data = yaml.safe_load(args.script.read_text(encoding="utf-8")) or []
        if not isinstance(data, list):
            raise ValueError("the script must be a list of steps")
        steps.extend(ScriptStep.parse(item) for item in data)
    for name, raw in getattr(args, "call", None) or []:
        steps.append(ScriptStep(calls=((name, json.loads(raw)),)))
    return steps


def _run(args: argparse.Namespace) -> int:
    return run_with_config(args)


def run_with_config(
    args: argparse.Namespace, *, model: Any = None, secrets: tuple[str, ...] = (), limits: Any = None
) -> int:
    """``tether mcp run`` and ``tether run --config``: a question over the configured servers.

    ``model``: a real backend (``tether run --model``); without it the scripted stand-in runs.
    """
    import anyio

    from tether.commands._output import emit_json
    from tether.errors import TetherError
    from tether.mcpapp.runner import run_question, standin_sampler

    try:
        config = _load(args)
        script = _script(args)
        approvals = None
        if getattr(args, "db", None) is not None:
            from tether.mcpapp.resumable import approvals_for

            approvals = approvals_for(args.db, args.config)
    except (TetherError, ValueError, OSError) as err:
        return _fail(args, err)
    for s in config.servers:
        shown = " ".join(s.argv()) if s.transport == "stdio" else s.url
        print(f"launching {s.name}: {shown}", file=sys.stderr)
    try:
        run = anyio.run(
            lambda: run_question(
                config,
                args.question,
                script,
                responder=_responder(getattr(args, "ask", "auto")),
                obey=not getattr(args, "no_obey", False),
                sampling_model=standin_sampler() if getattr(args, "sampler", "none") == "standin" else None,
                sampling_consent=_consent(getattr(args, "consent", "no")),
                model=model,
                secrets=secrets,
                limits=limits,
                approvals=approvals,
            )
        )
    except TetherError as err:
        return _fail(args, err)
    summary = run.summary()
    summary["mcp_notes"] = _notes(run)
    reason = summary["stop_reason"]
    if not args.json:
        print(f"stop_reason: {reason}")
        if summary.get("detail"):
            print(f"detail: {summary['detail']}")
        for c in summary["calls"]:
            print(_safe(f"call {c['tool']}: {c['status']}{' (' + c['reason'] + ')' if c['reason'] else ''}"))
        for note in summary["mcp_notes"]:
            print(_safe(note))
        for name, why in summary["unavailable_servers"].items():
            print(f"unavailable: {name}: {why}")
        for name, tools in summary["offered_tools"].items():
            if not tools and name not in summary["unavailable_servers"]:
                print(f"server {name}: no approved tools offered (tether mcp review/approve {name})")
        for b in summary["blocked"]:
            what = b.get("tool") or b.get("server")
            print(_safe(f"blocked: {b['kind']} {what}: {b.get('why') or b.get('reason') or ''}"))
        print(f"answer: {_safe(summary.get('answer'))}")
        print(f"trace: {summary.get('trace')}")
    else:
        emit_json(summary)
    return EXIT.get(reason, 7)


def _notes(run: Any) -> list[str]:
    """What the call lines alone would hide: a server running unconfined, a question the host or
    the person declined during a call that still returned ok, a result the host cleaned."""
    from tether.mcp.hosting import mcp_sources

    notes = [f"warning: server {s.name}: {w}" for s in mcp_sources(run.host) for w in s.warnings]
    for o in run.result.observations:
        for e in o.meta.get("elicitation", []):
            if e["outcome"] not in ("accept", "paused"):
                why = f": {e['reason']}" if e.get("reason") else ""
                notes.append(f"elicitation in {o.tool}: {e['outcome']} by the {e['by']}{why}")
        if o.meta.get("cleaned"):
            notes.append(f"cleaned result of {o.tool}: {json.dumps(o.meta['cleaned'], ensure_ascii=True)}")
    return notes


def _resume(args: argparse.Namespace) -> int:
    import getpass

    import anyio

    from tether.commands._output import emit_json
    from tether.errors import TetherError
    from tether.mcpapp.runner import answer_pause, resume_pause

    try:
        config = _load(args)
        content = None
        action = "decline" if args.decline else "cancel" if args.cancel else "accept"
        if action == "accept":
            content = json.loads(args.answer)
        if args.answer_only:
            pause = answer_pause(config, args.pause_id, action, content, actor=args.by or getpass.getuser())
            if args.json:
                emit_json({"ok": True, "pause": pause.id, "run_id": pause.run_id, "action": action})
            else:
                print(f"{pause.id}: answered ({action}); run: tether resume {pause.run_id}")
            return 0
        out = anyio.run(
            lambda: resume_pause(config, args.pause_id, action, content, actor=args.by or getpass.getuser())
        )
    except (TetherError, ValueError) as err:
        return _fail(args, err, 2)
    if args.json:
        emit_json({"ok": out["status"] == "ok", **out})
    else:
        print(f"{out['tool']}: {out['status']}\n{_safe(out['result'])}\ntrace: {out['trace']}")
    return 0 if out["status"] == "ok" else 2


def _pauses(args: argparse.Namespace) -> int:
    from tether.commands._output import emit_json
    from tether.errors import TetherError
    from tether.mcp.pauses import PauseStore

    try:
        config = _load(args)
    except TetherError as err:
        return _fail(args, err)
    store = PauseStore(config.path(config.host.state))
    try:
        rows = [
            {"id": p.id, "server": p.server, "tool": p.tool, "message": p.message, "schema": p.schema}
            for p in store.pending()
        ]
    finally:
        store.close()
    if args.json:
        emit_json({"ok": True, "pending": rows})
    else:
        for r in rows:
            print(_safe(f"{r['id']}  {r['tool']}  asks: {r['message']}"))
        if not rows:
            print("no pending elicitations")
    return 0
