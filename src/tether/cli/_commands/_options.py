"""The options more than one command takes, each declared once: ``--json``, ``--db`` before or
after the action, a person's answer to a paused question, ``--scenario``, ``--out``, the scripted
stand-in's ``--script`` and ``--call``, and the model and output groups of the commands that run
an agent (``tether run``, ``tether mcp run``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = [
    "add_actions",
    "add_answer",
    "add_db",
    "add_json",
    "add_model_options",
    "add_out",
    "add_output_options",
    "add_resolve",
    "add_scenario",
    "add_script",
    "answer_of",
]

JSON_HELP = "print one JSON object as the last line"


def add_json(p: argparse.ArgumentParser, help: str = JSON_HELP) -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_actions(
    sub: Any, name: str, *, dest: str, help: str, metavar: str = "ACTION", **kw: Any
) -> tuple[argparse.ArgumentParser, Any]:
    """Command ``name`` whose next word is a required action: its parser and the action parsers."""
    kw.setdefault("description", f"{help[0].upper()}{help[1:]}.")
    p = sub.add_parser(name, help=help, **kw)
    return p, p.add_subparsers(dest=dest, metavar=metavar, required=True)


def add_db(parser: argparse.ArgumentParser, actions: Any, help: str) -> None:
    """``--db`` before the action and after it (SUPPRESS: the action's default does not reset it)."""
    parser.add_argument("--db", default=None, help=help)
    for action in actions.choices.values():
        action.add_argument("--db", default=argparse.SUPPRESS, help=help)


def add_answer(p: argparse.ArgumentParser, by: str) -> None:
    """A person's answer to a paused question (read by ``answer_of``): ``--answer``, ``--decline``
    or ``--cancel``, and who gives it (``--by``, by default ``by``)."""
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--answer", help="the answer as a JSON object (validated against the question)")
    how.add_argument("--decline", action="store_true", help="decline to answer")
    how.add_argument("--cancel", action="store_true", help="cancel the question")
    p.add_argument("--by", help=f"who answers (default: {by})")


def answer_of(args: argparse.Namespace) -> tuple[str, dict[str, Any] | None]:
    """The action and the content ``add_answer``'s options give. Raises ``ApprovalError``
    (``invalid_answer``) for an ``--answer`` that is not a JSON object."""
    import json

    from tether.errors import ApprovalError

    if args.decline or args.cancel:
        return ("decline" if args.decline else "cancel"), None
    try:
        content = json.loads(args.answer)
    except json.JSONDecodeError as err:
        why = f"--answer is not JSON ({err.msg} at character {err.pos})"
        raise ApprovalError("invalid_answer", why) from None
    if not isinstance(content, dict):
        raise ApprovalError("invalid_answer", "--answer must be a JSON object")
    return "accept", content


def add_resolve(actions: Any, help: str) -> None:
    """The ``resolve`` action: a person records what became of an escalated effect."""
    r = actions.add_parser("resolve", help=help)
    r.add_argument("key", help="idempotency key of the ledger entry")
    r.add_argument("--happened", choices=("yes", "no"), required=True)
    r.add_argument("--reviewer", default=None, help="who resolves it (default: $USER)")
    r.add_argument("--note", default="")


def add_scenario(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--scenario", metavar="NAME", help=help)


def add_script(p: argparse.ArgumentParser, when: str = "") -> None:
    """The scripted stand-in's steps, ``--script`` and ``--call`` (read by ``mcp._script``);
    ``when`` begins their help: when they apply."""
    steps = "YAML/JSON list of steps {call, arguments} | [..] | {final}"
    p.add_argument("--script", type=Path, help=f"{when}scripted stand-in: {steps}")
    p.add_argument(
        "--call",
        nargs=2,
        action="append",
        default=[],
        metavar=("TOOL", "JSON"),
        help=f"{when}scripted stand-in: one call (repeatable)",
    )


def add_out(p: argparse.ArgumentParser, help: str, default: str = "tether-output") -> None:
    p.add_argument("--out", type=Path, default=Path(default), help=help)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The model and budget options of `tether run` and `tether mcp run`."""
    g = p.add_argument_group("model (overrides the agent file)")
    g.add_argument("--model", help="model name, or scripted:STEPS.yaml for a scripted stand-in")
    g.add_argument(
        "--provider",
        choices=("openai-chat", "openai-responses", "anthropic"),
        help="the model's protocol (default: the agent file's, else openai-chat)",
    )
    g.add_argument("--base-url", help="the API's base URL (default $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL)")
    g.add_argument(
        "--api-key-env",
        help="environment variable holding the API key (default OPENAI_API_KEY, ANTHROPIC_API_KEY for "
        "anthropic; the key itself is never printed, traced or recorded)",
    )
    g.add_argument(
        "--no-stream", action="store_true", help="whole responses, even if the agent file asks for a stream"
    )
    g.add_argument(
        "--reasoning",
        choices=("drop", "keep", "since_last_user"),
        help="resend reasoning_content: default per model name (documentation: 'Real models and backends')",
    )
    g.add_argument(
        "--prices", type=Path, help="JSON price table: {model: {input, output, cached_input, cache_write}}"
    )
    g.add_argument("--rate", type=float, help="requests per second to the model backend (shared bucket)")
    g.add_argument("--max-llm-calls", type=int, help="LLM-call budget for this invocation")
    g.add_argument("--max-tokens", type=int, help="token budget (prompt + completion, all calls)")
    g.add_argument("--max-cost", type=float, help="cost budget in USD (the model must be priced)")
    g.add_argument("--deadline", type=float, help="deadline in seconds")


def add_output_options(p: argparse.ArgumentParser) -> None:
    add_json(p, "one JSON object as the last line; no progress")
    p.add_argument("--show-results", action="store_true", help="print every tool result in full")
    p.add_argument(
        "--trace-results",
        action="store_true",
        help="store every tool result's content (redacted) beside the trace: <run>.results.jsonl",
    )
