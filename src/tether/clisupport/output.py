"""What every command prints: human text by default; with ``--json``, one JSON object on the last
line whose top-level keys always include ``ENVELOPE`` (null when they do not apply).

Exit codes: ``EXIT_CODES`` by stop reason, ``EXIT_MEANINGS`` in words. A run that ends
``accepted`` while some requested calls were denied or refused exits 2, or 6 when calls failed or
reached an unavailable server: exit 0 means every requested call ran and succeeded.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

EXIT_CODES = {
    reason: code
    for code, reasons in {
        0: "accepted",
        2: "policy_denied approval_denied",
        3: "invalid_handoff",
        4: "max_steps budget deadline repetition",
        5: "approval_required",
        6: "dependency_unavailable",
        7: "model_error truncated model_refused internal_error",
        130: "interrupted",
    }.items()
    for reason in reasons.split()
}
USAGE = 1  # a usage or configuration error: nothing ran
NEEDS_DURABLE = "needs the durable extra (pip install 'tether[durable]')"
# The optional packages by top-level module, and the extra (pyproject.toml) that installs each.
EXTRA_OF_MODULE = {
    "dbos": "durable",
    "psycopg": "postgres",
    "openai": "openai",
    "anthropic": "anthropic",
    "matplotlib": "evals",
    "opentelemetry": "otel",
    **dict.fromkeys(("starlette", "uvicorn", "jinja2", "itsdangerous", "multipart"), "console"),
}


def missing_extra(err: BaseException) -> str | None:
    """What to install when ``err`` is an import of an optional package that is not installed
    (``needs the durable extra (pip install 'tether[durable]'): no module named 'dbos'``), else None."""
    name = getattr(err, "name", None)
    if not isinstance(err, ModuleNotFoundError) or not isinstance(name, str):
        return None
    extra = EXTRA_OF_MODULE.get(name.split(".")[0])
    if extra is None:
        return None
    also = " or, for durable runs, 'tether[durable]'" if extra == "postgres" else ""
    return f"needs the {extra} extra (pip install 'tether[{extra}]'{also}): no module named {name!r}"


# What each code means: the help of every command that runs something, and the docs' table.
EXIT_MEANINGS = {
    0: "accepted, and every call the model asked for ran and succeeded",
    1: "usage or configuration error: nothing ran",
    2: "denied by the policy or a person (also: accepted, but some calls were denied or refused)",
    3: "invalid handoff",
    4: "a limit: budget, steps, deadline, repetition",
    5: "waiting for a person: an approval or an answer",
    6: "a dependency was unavailable (also: accepted, but some calls failed)",
    7: "model or internal error (also truncated, model_refused)",
    130: "interrupted (SIGINT, SIGTERM): the run stopped, its trace and checkpoint written",
}
EXIT_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANINGS.items()) + "."
ENVELOPE = ("ok", "exit", "stop_reason", "error", "message")


def emit_json(payload: dict[str, Any], *, exit: int) -> None:
    """The last line of a command: one JSON object with the common keys filled in."""
    out = {**dict.fromkeys(ENVELOPE), "ok": exit == 0, **payload, "exit": exit}
    sys.stdout.write(json.dumps(out, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def fail(command: str, err: BaseException | str, *, as_json: bool, code: int = USAGE, **extra: Any) -> int:
    """Report an error that stopped a command before or outside a run; returns ``code``."""
    message = str(err)
    kind = getattr(err, "reason", None) or (type(err).__name__ if isinstance(err, BaseException) else "error")
    print(terminal(f"{command}: {message}"), file=sys.stderr)
    if as_json:
        emit_json({"ok": False, "error": kind, "message": message, **extra}, exit=code)
    return code


def outcome(payload: dict[str, Any], text: str | None, *, as_json: bool, exit: int = 0) -> int:
    """A command's outcome: ``payload`` as the JSON last line, else ``text`` (``None``: already
    printed); returns ``exit``."""
    if as_json:
        emit_json(payload, exit=exit)
    elif text is not None:
        print(terminal(text))  # its records' text (a server's, a model's, a reviewer's) as written
    return exit


def table(rows: list[dict[str, Any]], columns: list[str], empty: str | None = None) -> str:
    """``rows`` aligned in ``columns``; ``empty`` instead when there are none and it is given."""
    if not rows and empty is not None:
        return empty
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines.append("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        lines.append("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
    return "\n".join(lines)


_HINTS = {
    # Never "declare it read": a tool that changes something must keep its effect.
    "approval_unavailable": "this call needs a person's approval and the run has no approval store: "
    "give one (agent file: policy.approvals_db, or --db) so the run pauses for a person to approve it",
    "tool_not_allowed": "the tool is not on the allowlist (agent file: policy.allow / policy.deny)",
    "tool_definition_not_approved": "review and pin the server's tools: tether mcp review/approve",
    "capability_blocked": "the tool's definition changed or is not approved: tether mcp review/approve",
}


def call_problems(
    result: Any,
    unavailable_servers: Iterable[str] = (),
    mcp_servers: Iterable[str] = (),
    where: str = "--config MCP.yaml",
) -> list[dict[str, Any]]:
    """Every requested call that did not run and succeed: denied, refused, failed, unavailable (a
    tool of one of ``unavailable_servers``), or unapproved (one of ``mcp_servers`` does not offer it)."""
    down = {f"{name}__" for name in unavailable_servers}
    servers = {f"{name}__": name for name in mcp_servers}
    unavailable_calls = {
        o.call_id
        for o in getattr(result, "observations", ())
        if o.is_error and (o.meta.get("unavailable") or o.error_kind == "dependency_unavailable")
    }
    # A call that paused (for an answer or an approval) and ran later counts by its last attempt.
    last = {c.call_id: c for c in result.calls}
    problems = []
    for c in last.values():
        if c.status == "ok":
            continue
        kind = {"denied": "denied", "rejected": "rejected"}.get(c.status, "failed")
        reason = c.reason
        if c.call_id in unavailable_calls:
            kind = "unavailable"
        elif c.status == "rejected" and any(c.tool.startswith(p) for p in down):
            kind, reason = "unavailable", f"server {c.tool.split('__', 1)[0]} is unavailable ({reason})"
        hint = next((h for key, h in _HINTS.items() if key in reason), None)
        prefix = next((p for p in servers if c.tool.startswith(p)), None)
        if c.status == "rejected" and reason.startswith("unknown tool") and prefix and kind != "unavailable":
            name = servers[prefix]
            reason = f"server {name} offers no approved tool {c.tool.removeprefix(prefix)!r} ({reason})"
            hint = f"if the server has it, review and pin it: tether mcp review {name} {where}, then "
            hint += f"tether mcp approve {name} {where}"
        entry = {"call_id": c.call_id, "tool": c.tool, "kind": kind, "reason": reason}
        if hint:
            entry["hint"] = hint
        problems.append(entry)
    return problems


def run_exit(stop_reason: str, problems: list[dict[str, Any]]) -> int:
    """The exit code of a run: its stop reason's, unless an accepted run left calls undone."""
    code = EXIT_CODES.get(stop_reason, 7)
    if code != 0 or not problems:
        return code
    kinds = {p["kind"] for p in problems}
    return 2 if kinds & {"denied", "rejected"} else 6


def run_payload(
    result: Any,
    *,
    unavailable_servers: Iterable[str] = (),
    mcp_servers: Iterable[str] = (),
    where: str = "--config MCP.yaml",
    **extra: Any,
) -> dict[str, Any]:
    """The JSON of one run: its summary, every call, the problems, and the envelope."""
    problems = call_problems(result, unavailable_servers, mcp_servers, where)
    out: dict[str, Any] = result.summary()
    out["calls"] = [
        {"call_id": c.call_id, "tool": c.tool, "status": c.status, "reason": c.reason} for c in result.calls
    ]
    out.update(extra)
    out["notes"] = result_notes(result)
    # An unpriced model's answers count 0 in cost_usd: say so, or 0.0 reads as "free".
    events = getattr(result, "events", ())
    out["unpriced"] = any(str(e.kind) == "model_response" and e.data.get("unpriced") for e in events)
    out.update(run_envelope(str(result.stop_reason), result.detail, problems))
    return out


def run_envelope(stop: str, detail: str, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """The envelope of a run's outcome (``ok``, ``exit``, ``stop_reason``, ``problems``, ``error``,
    ``message``) by ``run_exit``: every command that reports a run, in process or durable."""
    code = run_exit(stop, problems)
    return {
        "ok": code == 0,
        "exit": code,
        "stop_reason": stop,
        "problems": problems,
        "error": None if code == 0 else ("calls_not_completed" if stop == "accepted" else stop),
        "message": _message(stop, detail, problems),
    }


def result_notes(result: Any) -> list[str]:
    """What the call lines alone would hide: a question declined during a call that still returned
    ok, a result the host cleaned of hidden text or markup."""
    notes: list[str] = []
    for o in result.observations:
        for e in o.meta.get("elicitation", []) or []:
            if isinstance(e, dict) and e.get("outcome") not in ("accept", "paused"):
                why = f": {e['reason']}" if e.get("reason") else ""
                notes.append(f"elicitation in {o.tool}: {e.get('outcome')} by the {e.get('by')}{why}")
        if o.meta.get("cleaned"):
            notes.append(f"cleaned result of {o.tool}: {json.dumps(o.meta['cleaned'], ensure_ascii=True)}")
    return notes


def _message(stop: str, detail: str, problems: list[dict[str, Any]]) -> str | None:
    if stop != "accepted":
        return f"{stop}: {detail}" if detail else stop
    if problems:
        listed = "; ".join(f"{p['tool']} {p['kind']} ({p['reason']})" for p in problems[:5])
        more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        return f"answered, but {len(problems)} requested call(s) did not run and succeed: {listed}{more}"
    return None


def model_hints(stop_reason: str, detail: str, model: Any) -> list[str]:
    """What to check when a run ends ``model_error``, only as its detail shows it: the URL refused,
    the context window outgrown, an unset key variable, a stream the server could not give."""
    import os

    if stop_reason != "model_error" or model is None:
        return []
    backends = list(getattr(model, "models", None) or [model])  # a FallbackModel: each in turn
    hints: list[str] = []
    errors = _errors_of(len(backends), getattr(model, "switches", ()), detail)
    for backend, text in zip(backends, errors, strict=True):
        url = getattr(backend, "base_url", None)
        if url and re.search(r"connect|connection|refused|unreachable", text, re.IGNORECASE):
            came = getattr(backend, "base_url_from", "given")
            origin = f"from {came}; " if came.startswith("$") else ""
            hints.append(
                f"could not reach the model server at {url}: is it running there? "
                f"({origin}agent file: model.base_url, or --base-url)"
            )
        var = getattr(backend, "api_key_env", None)
        if var and not os.environ.get(var) and _AUTH.search(text):
            hints.append(
                f"${var} is not set, so no API key was sent (agent file: model.api_key_env names the "
                "variable; a local server needs none)"
            )
        if getattr(backend, "stream", False) and "stream" in text.lower():
            hints.append(
                "the model was asked to stream: some servers (llama.cpp's Python server) cannot stream "
                "tool calls; set model.streaming: false or pass --no-stream"
            )
    if _CONTEXT.search(detail or ""):
        hints.append(
            "the conversation, with the answer being generated, outgrew the model's context window: "
            "serve the model with a larger one (llama.cpp: --n_ctx / -c) or take fewer steps "
            "(model.limits.max_steps); a small model can also run on inside a tool call's arguments "
            "until any window is full"
        )
    return list(dict.fromkeys(hints))


def _errors_of(count: int, switches: Any, detail: str) -> list[str]:
    """What each of a chain's ``count`` models met, so that a hint is given for the model whose
    error shows it (before, one model's refused connection named every model's URL as
    unreachable): the k-th switch left the k-th model with its error; the model in use at the end
    met the rest of the detail; a model never reached met nothing."""
    left = [str(s.get("error", "")) for s in list(switches)[: count - 1]]
    rest = detail or ""
    for error in left:
        rest = rest.replace(error, "")
    return [*left, rest, *[""] * (count - len(left) - 1)]


def model_fallbacks(model: Any) -> list[dict[str, str]]:
    """Each switch a fallback chain took in the run (model, error, to), whatever the run ended
    with: a run a fallback model answered still says the model it left, and why. An error that
    refused the credential (401/403) gets a ``fix`` naming the key variable: a wrong key is said,
    not hidden behind the backup that answered."""
    import os

    chain = list(getattr(model, "models", ()))
    found: list[dict[str, str]] = []
    for at, switch in enumerate(getattr(model, "switches", ())):
        entry = {k: str(switch.get(k, "")) for k in ("model", "error", "to")}
        # The model that failed by its place in the chain (the k-th switch leaves the k-th model),
        # not by its name: a chain may fall back to the same name on another provider, whose
        # key variable is another (before: the last model of that name's was named).
        failed, to = (chain[at], chain[at + 1]) if at + 1 < len(chain) else (None, None)
        for key, of in (("provider", failed), ("to_provider", to)):
            if isinstance(provider := getattr(of, "provider", None), str):
                entry[key] = provider
        var = getattr(failed, "api_key_env", None)
        if var and _AUTH.search(entry["error"]):
            state = "is not set" if not os.environ.get(var) else "holds a key the server refused"
            entry["fix"] = (
                f"${var} {state}: set the right key (agent file: model.api_key_env names the variable)"
            )
        found.append(entry)
    return found


def _on(model: str, provider: str | None) -> str:
    """A model of a fallback chain as a line names it: with its provider where it has one."""
    return f"{model} ({provider})" if provider else model


# What a refused credential looks like in a failure's detail (HTTP 401/403 or the error's words).
_AUTH = re.compile(
    r"HTTP 40[13]\b|unauthori[sz]ed|authenticat|forbidden|permission|api[ _-]?key|x-api-key", re.I
)
# A request the server refused because it does not fit the context (llama.cpp, vLLM, OpenAI wording).
_CONTEXT = re.compile(
    r"context length|context window|context_length_exceeded|maximum context|exceeds? the context", re.I
)


def block_fix(entry: dict[str, Any], where: str = "--config MCP.yaml") -> str | None:
    """What to change about something the host blocked (an entry of a run's ``blocked``)."""
    kind, server = entry.get("kind"), entry.get("server") or str(entry.get("tool", "")).split("__", 1)[0]
    reason = str(entry.get("reason") or "")
    review = f"tether mcp review {server} {where}, then tether mcp approve {server} {where}"
    if kind == "mcp_capability_blocked":
        if "impersonate" in str(entry.get("why")):
            return "none here: a name like another server's tool is never approved; the server must rename it"
        if entry.get("status") == "changed":
            return f"its definition changed since approval: review the change and pin it again: {review}"
        return f"review it and pin it if you trust it: {review}"
    if kind == "mcp_result_rejected":
        if reason == "oversized":
            return f"raise max_result_chars for server {server} in the config if the size is expected"
        if reason == "output_schema":
            return f"the server's result broke its own approved output schema: a server fault ({review})"
        return None
    if kind == "mcp_elicitation":
        return (
            f"to let a person answer: elicitation: {{enabled: true}} for server {server}, and --ask console"
        )
    if kind == "mcp_sampling":
        return f"to answer samples: sampling: {{enabled: true}} for server {server}, and --sampler model"
    if kind == "network_refused":
        where_to = entry.get("destination") or "it"
        return f"if server {server} should reach {where_to}, add it to that server's network list ({where})"
    return next((h for key, h in _HINTS.items() if key in reason), None)


def print_run(payload: dict[str, Any], *, show_results: list[tuple[str, str]] | None = None) -> None:
    """The human view of one run (untrusted text is escaped for the terminal)."""
    if payload["stop_reason"] == "accepted" and payload["exit"] != 0:
        # The model answered, but the exit code says what the run left undone: one line, not two.
        print(f"outcome: answered, calls not completed  (exit {payload['exit']}; stop_reason: accepted)")
    else:
        print(f"stop_reason: {payload['stop_reason']}  (exit {payload['exit']})")
    if payload.get("detail"):
        print(safe(f"detail: {payload['detail']}"))
    for c in payload.get("calls", ()):
        print(safe(f"call {c['tool']}: {c['status']}{' (' + c['reason'] + ')' if c['reason'] else ''}"))
    for name, why in (payload.get("unavailable_servers") or {}).items():
        print(safe(f"unavailable: {name}: {why}"))
    # What the host blocked, with its fix: one line per reason, naming every tool it concerns.
    hinted = {p["tool"] for p in payload.get("problems", ()) if p.get("hint")}
    groups: dict[tuple[str, str, str], list[str]] = {}
    for b in payload.get("blocked", ()):
        what = str(b.get("tool") or b.get("server") or "")
        why = str(b.get("why") or b.get("reason") or b.get("status") or b.get("outcome") or "")
        fix = "" if what in hinted else str(b.get("fix") or "")  # the call's own hint says it already
        groups.setdefault((str(b.get("kind")), why[:300], fix), []).append(what)
    for (kind, why, fix), names in groups.items():
        shown = ", ".join(dict.fromkeys(names))
        print(safe(f"blocked ({kind}): {shown}: {why}"))
        if fix:
            print(safe(f"  fix: {fix}"))
    for note in payload.get("mcp_notes", payload.get("notes", ())):
        print(safe(note))
    for p in payload.get("problems", ()):
        if p.get("hint"):
            print(safe(f"hint for {p['tool']}: {p['hint']}"))
    for hint in payload.get("hints", ()):
        print(safe(f"hint: {hint}"))
    for f in payload.get("model_fallbacks", ()):
        at, to = f["model"], f["to"]
        if at == to:  # the same name on another provider or endpoint: which is which
            at, to = _on(at, f.get("provider")), _on(to, f.get("to_provider"))
        print(safe(f"warning: model {at} failed, the run moved to {to}: {f['error'][:300]}"))
        if f.get("fix"):
            print(safe(f"  fix: {f['fix']}"))
    for tool_name, text in show_results or ():
        print(f"--- result of {tool_name} ---")
        print(safe(text))
    if payload.get("stop_reason") == "accepted" and payload.get("problems"):
        print(safe(f"note: {payload['message']}"))
    print(safe(f"answer: {payload.get('answer')}"))
    for key in ("llm_calls", "tokens", "cost_usd", "trace", "results_file"):
        if payload.get(key) not in (None, ""):
            unpriced = key == "cost_usd" and payload.get("unpriced")
            why = f"  (not counted: {payload.get('model') or 'the model'} has no price; add model.prices)"
            print(safe(f"{key}: {payload[key]}{why if unpriced else ''}"))


_KEPT = re.compile(r"([\n\t\\])")


def terminal(text: str) -> str:
    """A command's human output for a terminal: line breaks, tabs and backslashes kept, every other
    control or format character written as an escape (``\\x1b``, ``\\u202e``) by the trace's
    ``sanitize`` (the one classification of what a terminal acts on), so no record's text can move
    the cursor, rewrite a line or reorder what the person reads."""
    if text.isprintable():
        return text
    from tether.trace._sanitize import sanitize

    return "".join(p if p in ("\n", "\t", "\\") else sanitize(p) for p in _KEPT.split(text))


def safe(text: object) -> str:
    """Untrusted text for a terminal: line breaks kept, every other control or format character
    escaped (no ANSI sequences, no carriage-return overwrites, no bidi tricks)."""
    from tether.trace._sanitize import sanitize

    return "\n".join(sanitize(line) for line in str(text).split("\n"))
