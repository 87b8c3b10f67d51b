"""Faults and quirks the fault table (``test_faults.py``) lacks, driven the way a user meets
them: an agent file naming ``model.provider`` and ``tether run``, against a real server on
127.0.0.1 speaking chat completions, the Anthropic Messages API or the OpenAI Responses API,
streamed and whole, over the SDK transport and plain httpx2.

Quirks a real server has that are no fault end ``accepted`` with the answer, exit 0: ``data:``
without its space, a byte-order mark, events after the terminal one, a body held open after it,
a JSON answer labelled ``text/plain`` or with no type, a stream sent when none was asked for,
tool arguments as an object, the older ``function_call`` field, content as a list of parts, a
tool-call header repeated in every delta, tool-call indexes with gaps, an Anthropic tool input
as JSON text or whole in ``content_block_start``, a terminal Responses event without output.
Faults end with a typed stop reason and a non-zero exit, never ``accepted``, retried only when
another try may help, and within the call's ``timeout_s``: 408, 409, 413, 422, 503 with an
HTTP-date ``retry-after`` (passed, or hours away), 504 with no body, an empty 200, 204, an HTML
page as a 200, a ``gzip`` label on a plain body, a dropped connection, a server that never
answers or never ends its body, ``choices: null``, a delta for a block never started, a turn
that only reasoned, ``response.failed``, ``incomplete`` for ``content_filter``, status
``cancelled``, a ``null``, ``pause_turn`` or context-window stop reason, and a tool call cut at
the token limit (never run).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.cli import main
from tether_testing.fake_server import FakeChatServer, Pause, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

ANSWER = "Order 742 is open — awaiting part P-17 ✓"
ORDER = ("read_order", '{"order_id": "742"}')
SERVERS: dict[str, type[FakeChatServer]] = {
    "openai-chat": FakeChatServer,
    "openai-responses": FakeResponsesServer,
    "anthropic": FakeAnthropicServer,
}
TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool

@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}
'''
BOM = b"\xef\xbb\xbf"
SDKS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


# -- how each protocol's events are written on the wire -------------------------------------


def sse(provider: str, event: dict[str, Any], *, space: bool = True) -> bytes:
    data = ("data: " if space else "data:") + json.dumps(event) + "\n\n"
    head = "" if provider == "openai-chat" else f"event:{' ' if space else ''}{event.get('type')}\n"
    return (head + data).encode()


def terminal(provider: str) -> bytes:
    """What a stream sends last, again: ``[DONE]`` or the protocol's own terminal event."""
    if provider == "openai-chat":
        return b"data: [DONE]\n\n"
    if provider == "anthropic":
        return sse(provider, {"type": "message_stop"})
    return b""  # a Responses stream ends at its terminal event (its response is in it)


def each_tool_arguments(items: list[Any], fn: Callable[[dict[str, Any]], None]) -> list[Any]:
    """Call ``fn`` on every dict that carries a tool call's ``arguments`` (or Anthropic ``input``)."""

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "arguments" in value or value.get("type") == "tool_use":
                fn(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(items)
    return items


def arguments_as_object(items: list[Any]) -> list[Any]:
    """Tool arguments sent as a JSON object, not a string holding one (Ollama and others)."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("arguments"), str) and d["arguments"].startswith("{"):
            d["arguments"] = json.loads(d["arguments"])

    return each_tool_arguments(items, fix)


# -- the cases ----------------------------------------------------------------------------------

Make = Callable[[str, bool], "list[Reply] | None"]  # (provider, stream) -> the replies, or None: n/a


@dataclass(frozen=True)
class Case:
    name: str
    replies: Make
    ok: bool  # accepted with ANSWER, exit 0; else a typed stop, non-zero exit
    said: tuple[str, ...] = ()  # pieces of the run's message when not ok ("gave up": retried)
    modes: tuple[str, ...] = ("stream", "whole")
    timeout_s: float = 3.0
    force_stream: bool = False  # the server streams even when asked for a whole answer
    ignore_stream: bool = False  # the server answers whole even when asked for a stream
    stop: str | None = None  # the stop reason, when it is not model_error


def good(**kw: Any) -> Make:
    """A tool call, then the answer, each changed by ``kw`` (``edit`` gets the provider)."""
    edit = kw.pop("edit", None)

    def make(p: str, stream: bool) -> list[Reply]:
        more = dict(kw, edit=(lambda items: edit(p, stream, items)) if edit else None)
        return [Reply.calls(ORDER, **more), Reply.text(ANSWER, **more)]

    return make


def twice(make: Callable[[str, bool], Reply | None]) -> Make:
    def replies(p: str, stream: bool) -> list[Reply] | None:
        reply = make(p, stream)
        return None if reply is None else [reply, reply, Reply.text(ANSWER)]

    return replies


def only(providers: tuple[str, ...], make: Make) -> Make:
    return lambda p, stream: make(p, stream) if p in providers else None


def no_space(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [sse(p, i, space=False) if isinstance(i, dict) else i.replace(b"data: ", b"data:") for i in items]


def bom_first(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """A UTF-8 byte-order mark before the body; a chat stream with no role chunk, so its first
    event carries text (an SSE reader must drop the mark, not the event)."""
    if p == "openai-chat" and stream:
        items = items[1:]
    first = items[0]
    return [BOM + (sse(p, first) if stream else json.dumps(first).encode()), *items[1:]]


def after_terminal(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The terminal event twice, then an event and a line that are not JSON."""
    return [*items, terminal(p), sse(p, {"type": "ping"}), b"data: {not json\n\n"]


def open_after_terminal(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Everything, then the body stays open past the call's timeout (a proxy that holds it)."""
    return [*items, Pause(4)]


def calls_with_index_gaps(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat tool-call deltas numbered from 3 (a server with its own numbering)."""
    for item in items:
        if isinstance(item, dict):
            for choice in item.get("choices") or ():
                for tc in (choice.get("delta") or {}).get("tool_calls") or ():
                    tc["index"] = tc.get("index", 0) + 3
    return items


def header_in_every_delta(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: every tool-call delta repeats the call's id, type and name (as some proxies send)."""
    head: dict[str, Any] = {}
    for item in items:
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            for tc in (choice.get("delta") or {}).get("tool_calls") or ():
                if tc.get("id"):
                    head = {"id": tc["id"], "type": "function", "name": tc["function"]["name"]}
                tc.update(id=head["id"], type="function")
                tc["function"]["name"] = head["name"]
    return items


def legacy_function_call(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: the call as the older ``function_call`` field (finish ``function_call``)."""
    for item in items:
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            wire = choice.get("delta" if stream else "message") or {}
            for tc in wire.pop("tool_calls", None) or ():
                wire["function_call"] = {k: v for k, v in tc["function"].items() if v or stream}
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "function_call"
    return items


def input_as_json_text(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a tool input sent as the JSON text of the object rather than the object."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("input"), dict):
            d["input"] = json.dumps(d["input"])

    return each_tool_arguments(items, fix)


def input_in_block_start(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: the tool input whole in ``content_block_start``, no ``input_json_delta``."""
    out = []
    for item in items:
        block = item.get("content_block") if isinstance(item, dict) else None
        if isinstance(block, dict) and block.get("type") == "tool_use":
            block["input"] = json.loads(ORDER[1])
        if isinstance(item, dict) and (item.get("delta") or {}).get("type") == "input_json_delta":
            continue
        out.append(item)
    return out


def content_parts(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: the message's content as a list of text parts (as requests write it)."""
    message = items[0]["choices"][0]["message"]
    if message.get("content"):
        message["content"] = [{"type": "text", "text": message["content"]}]
    return items


def failed(code: str, message: str) -> Callable[[str, bool], Reply]:
    """A Responses answer that failed: ``response.failed`` (streamed) or status ``failed``."""

    def edit(items: list[Any]) -> list[Any]:
        final = items[-1]["response"] if "response" in items[-1] else items[-1]
        final.update(status="failed", output=[], error={"code": code, "message": message})
        if "response" in items[-1]:
            items[-1]["type"] = "response.failed"
        return items

    return lambda p, stream: Reply.text(ANSWER, edit=edit)


def set_status(status: str, **more: Any) -> Callable[[list[Any]], list[Any]]:
    def edit(items: list[Any]) -> list[Any]:
        final = items[-1]["response"] if "response" in items[-1] else items[-1]
        final.update(status=status, **more)
        return items

    return edit


def reasoning_only(p: str, stream: bool) -> Reply:
    """A turn that only thought: a reasoning item or thinking block, no text, no call."""
    return Reply(reasoning="The order is open.")


def anthropic_stop(value: str | None) -> Callable[[str, bool], Reply]:
    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if item.get("type") == "message_delta":
                item["delta"]["stop_reason"] = value
            elif item.get("type") == "message" or "stop_reason" in item:
                item["stop_reason"] = value
        return items

    return lambda p, stream: Reply.text(ANSWER, edit=edit)


def error_status(status: int, body: bytes, **headers: str) -> Callable[[str, bool], Reply]:
    return lambda p, stream: Reply(
        status=status, body=body, headers={"content-type": "text/plain", **headers}
    )


def choices_null(p: str, stream: bool) -> Reply:
    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if isinstance(item, dict) and "choices" in item:
                item["choices"] = None
        return items

    return Reply.text(ANSWER, edit=edit)


def delta_never_started(p: str, stream: bool) -> Reply:
    """Anthropic: a ``content_block_delta`` for a block index no ``content_block_start`` opened."""

    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if item.get("type") == "content_block_delta":
                item["index"] = 42
        return items

    return Reply.text(ANSWER, edit=edit)


def final_output_empty(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: the terminal event's response lists no output (the items came one by one)."""
    items[-1]["response"]["output"] = []
    return items


def http_date(**ahead: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(**ahead), usegmt=True)


def cut_tool_call(why: str) -> Callable[[str, bool], Reply]:
    """Text and a tool call, the turn cut at the token limit (``length``: the arguments may be
    cut, here complete JSON by chance) or filtered (``refused``): the call must not run."""
    finish = {
        "length": {
            "openai-chat": "length",
            "anthropic": "max_tokens",
            "openai-responses": "max_output_tokens",
        },
        "refused": {
            "openai-chat": "content_filter",
            "anthropic": "refusal",
            "openai-responses": "content_filter",
        },
    }[why]
    return lambda p, stream: Reply(
        content="Let me read", tool_calls=(("read_order", '{"order_id": "7"}'),), finish_reason=finish[p]
    )


CASES = [
    # -- quirks: accepted with the same answer ----------------------------------------------
    Case("sse_data_without_space", good(edit=no_space), True, modes=("stream",)),
    Case("byte_order_mark_first", good(edit=bom_first), True),
    Case("events_after_the_terminal_one", good(edit=after_terminal), True, modes=("stream",)),
    Case("body_held_open_after_the_terminal_event", good(edit=open_after_terminal), True,
         modes=("stream",), timeout_s=1.5),
    Case("json_labelled_text_plain", good(headers={"content-type": "text/plain; charset=utf-8"}), True,
         modes=("whole",)),
    Case("whole_json_to_a_stream_request_labelled_text_plain",
         good(headers={"content-type": "text/plain"}), True, modes=("stream",), ignore_stream=True),
    Case("a_stream_to_a_whole_request", good(), True, modes=("whole",), force_stream=True),
    Case("sse_labelled_text_plain", good(headers={"content-type": "text/plain"}), True, modes=("stream",)),
    Case("no_content_type", good(headers={"content-type": ""}), True),
    Case("tool_arguments_an_object", only(("openai-chat", "openai-responses"),
         good(edit=lambda p, s, items: arguments_as_object(items))), True, modes=("whole",)),
    Case("tool_call_indexes_with_gaps", only(("openai-chat",), good(edit=calls_with_index_gaps)), True,
         modes=("stream",)),
    Case("tool_call_header_in_every_delta", only(("openai-chat",), good(edit=header_in_every_delta)), True,
         modes=("stream",)),
    Case("legacy_function_call", only(("openai-chat",), good(edit=legacy_function_call)), True),
    Case("tool_input_as_json_text", only(("anthropic",), good(edit=input_as_json_text)), True,
         modes=("whole",)),
    Case("tool_input_whole_in_block_start", only(("anthropic",), good(edit=input_in_block_start)), True,
         modes=("stream",)),
    Case("content_as_text_parts", only(("openai-chat",), good(edit=content_parts)), True, modes=("whole",)),
    Case("terminal_response_without_output", only(("openai-responses",), good(edit=final_output_empty)),
         True, modes=("stream",)),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Case("choices_null", only(("openai-chat",), twice(choices_null)), False, ("gave up",)),
    Case("delta_for_a_block_never_started", only(("anthropic",), twice(delta_never_started)), False,
         ("never started", "gave up"), modes=("stream",)),
    Case("whole_body_never_ends", twice(lambda p, s: Reply.text(ANSWER, edit=lambda i: [*i, Pause(4)])),
         False, ("did not complete within 0.5s", "gave up"), modes=("whole",), timeout_s=0.5),
    Case("408_timeout", twice(error_status(408, b"Request Timeout")), False, ("HTTP 408", "gave up")),
    Case("409_conflict", twice(error_status(409, b"")), False, ("HTTP 409", "gave up")),
    Case("413_too_large", twice(error_status(413, b"Request Entity Too Large")), False, ("HTTP 413",)),
    Case("422_unprocessable", twice(error_status(422, b'{"detail": "bad field"}')), False,
         ("HTTP 422", "bad field")),
    Case("503_retry_after_http_date", twice(error_status(
        503, b"upstream connect error", **{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})), False,
         ("HTTP 503", "upstream connect error", "gave up")),
    Case("503_retry_after_an_http_date_hours_away", twice(lambda p, s: Reply(
        status=503, body=b"down for maintenance", headers={"retry-after": http_date(hours=2)})), False,
         ("HTTP 503", "down for maintenance", "Retry-After too long")),
    Case("429_insufficient_quota", twice(lambda p, s: Reply(status=429, error_body={"error": {
        "message": "You exceeded your current quota", "type": "insufficient_quota", "param": None,
        "code": "insufficient_quota"}})), False, ("HTTP 429", "exceeded your current quota", "not retried")),
    Case("504_empty_body", twice(error_status(504, b"")), False, ("HTTP 504", "empty body", "gave up")),
    Case("empty_200", twice(lambda p, s: Reply.text(ANSWER, edit=lambda items: [b""])), False, ("gave up",)),
    Case("no_content_204", twice(lambda p, s: Reply(status=204, body=b"")), False, ("gave up",)),
    Case("gzip_label_on_a_plain_body", twice(lambda p, s: Reply.text(
        ANSWER, headers={"content-encoding": "gzip"})), False, ("gave up",)),
    Case("html_page_200", twice(lambda p, s: Reply.text(ANSWER, headers={"content-type": "text/html"},
         edit=lambda items: [b"<html><title>Sign in</title></html>"])), False,
         ("not a JSON object", "Sign in", "gave up")),
    Case("dropped_before_headers", twice(lambda p, s: Reply(drop=True)), False, ("gave up",)),
    Case("never_answers", twice(lambda p, s: Reply.text(ANSWER, delay_s=4)), False,
         ("did not complete within 0.5s", "gave up"), timeout_s=0.5),
    Case("reasoning_only", twice(lambda p, s: None if p == "openai-chat" else reasoning_only(p, s)),
         False, ("neither text nor tool calls", "gave up")),
    Case("response_failed_server_error", only(("openai-responses",), twice(
        failed("server_error", "The model crashed"))), False, ("The model crashed", "gave up")),
    Case("response_failed_invalid_prompt", only(("openai-responses",), twice(
        failed("invalid_prompt", "Invalid prompt: flagged"))), False, ("invalid_prompt",)),
    Case("response_incomplete_content_filter", only(("openai-responses",), twice(
        lambda p, s: Reply.text(ANSWER, finish_reason="content_filter"))), False, ("content_filter",),
         stop="model_refused"),
    Case("response_status_cancelled", only(("openai-responses",), twice(
        lambda p, s: Reply.text(ANSWER, edit=set_status("cancelled")))), False, ("cancelled",)),
    Case("stop_reason_null", only(("anthropic",), twice(anthropic_stop(None))), False, ("None",)),
    Case("stop_reason_pause_turn", only(("anthropic",), twice(anthropic_stop("pause_turn"))), False,
         ("pause_turn",)),
    Case("stop_reason_context_window_exceeded", only(("anthropic",), twice(anthropic_stop(
        "model_context_window_exceeded"))), False, ("model_context_window_exceeded",), stop="truncated"),
    Case("tool_call_cut_at_the_token_limit", twice(cut_tool_call("length")), False,
         ("token limit", "1 tool call(s) were not run"), stop="truncated"),
    Case("tool_call_in_a_filtered_turn", twice(cut_tool_call("refused")), False,
         ("refused or filtered", "1 tool call(s) were not run"), stop="model_refused"),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


def write_agent(tmp_path: Path, model: dict[str, Any]) -> Path:
    (tmp_path / "tools_heldout24.py").write_text(TOOLS, encoding="utf-8")
    spec = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": ["tools_heldout24:read_order"],
        "trace": {"dir": "traces"},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run_case(
    tmp_path: Path, provider: str, case: Case, mode: str, transport: str, servers: Mapping[str, Any] = SERVERS
) -> tuple[int, dict[str, Any], int, float]:
    """``tether run --agent`` against the case's server (of ``servers``): exit code, JSON summary,
    requests, seconds."""
    replies = case.replies(provider, mode == "stream") or []

    def respond(request: dict[str, Any], index: int) -> Reply:
        if case.force_stream:
            request["stream"] = True
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    with servers[provider](respond, ignore_stream=case.ignore_stream) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "timeout_s": case.timeout_s,
            "max_retries": 1,
            "streaming": mode == "stream",
            "transport": transport,
            "limits": {"deadline_s": 30},
        }
        path = write_agent(tmp_path, model)
        out = io.StringIO()
        if transport == "sdk":  # the SDK's first import in this process (seconds when the machine is
            importlib.import_module(SDKS[provider])  # loaded) is no try's time: it is not timed
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        took = time.monotonic() - started
        return code, json.loads(out.getvalue().strip().split("\n")[-1]), len(server.bodies()), took


def case_params(cases: list[Any]) -> list[Any]:
    """Each case on each protocol, streamed and whole as it says, over both transports, where
    the protocol can send it: the parameters of a round's fault test."""
    return [
        pytest.param(case, provider, mode, transport, id=f"{case.name}-{provider}-{mode}-{transport}")
        for case in cases
        for provider in sorted(SERVERS)
        for mode in case.modes
        for transport in ("sdk", "http")
        if case.replies(provider, mode == "stream") is not None  # the protocol can send it
    ]


PARAMS = case_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_held_out_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport)
    if case.ok:
        assert (code, out["stop_reason"], requests) == (0, "accepted", 2), out
        assert out["answer"] == ANSWER and [c["status"] for c in out["calls"]] == ["ok"]
        return
    assert code != 0 and out["stop_reason"] == (case.stop or "model_error"), out
    assert requests == (2 if "gave up" in case.said else 1)  # retried once, or final at once
    for piece in case.said:
        assert piece in out["message"], out["message"]
    assert "Traceback" not in out["message"]
    assert took < 2 * case.timeout_s + 5  # each try bounded by timeout_s, never the deadline


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_the_command_in_its_own_process_exits_by_how_the_answer_ended(tmp_path: Path, provider: str) -> None:
    """The same file through ``python -m tether.cli run``: a quirky stream is accepted (exit 0),
    a tool call cut at the token limit is not run and the run exits 7 ``truncated``."""
    quirk, cut = good(edit=bom_first)(provider, True), cut_tool_call("length")(provider, True)
    for replies, code, stop in ((quirk, 0, "accepted"), ([cut], 7, "truncated")):
        with SERVERS[provider](scripted(replies)) as server:
            model = {"provider": provider, "name": "m-1", "base_url": server.url, "streaming": True}
            path = write_agent(tmp_path, {**model, "timeout_s": 10, "max_retries": 0})
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tether.cli",
                    "run",
                    "Why is 742 open?",
                    "--agent",
                    str(path),
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            out = json.loads(done.stdout.strip().splitlines()[-1])
            assert (done.returncode, out["stop_reason"]) == (code, stop), done.stderr[-2000:]
            assert "Traceback" not in done.stdout + done.stderr
            assert len(server.bodies()) == len(replies)
        if code == 0:
            assert out["answer"] == ANSWER
