"""A fifteenth round: SSE framing, odd ends of a turn and HTTP-level faults, driven as the others
are (an agent file naming ``model.provider`` and ``tether run`` in process,
``test_faults_round10.run_agent``) against real servers on 127.0.0.1 speaking each protocol.

An error status whose body then stalls (a proxy that sends the status line, the headers and a
piece of its error body, then holds the connection): the status decides, as it does for a body
that came whole — a 400 or 401 ends the run at once, ``model_error`` naming the status (and,
for 401, the key variable), asked once; a 429 is retried after its ``retry-after`` and the next
answer accepted (before: the attempt waited for the body until ``timeout_s`` cut it, so a 401 or
400 was retried as a ``timeout`` and the run ended "did not complete within …", naming neither
the status nor the key, and a 429's ``retry-after`` was lost with it). The body is waited for at
most 2 s and half of what is left of the call (``_sse.status_error``).

A Responses stream that gave a call whole (added, argument deltas, done) and whose terminal
output lists the message alone (a proxy that rebuilds the final response from its text): the call
runs, with the reasoning the stream gave sent back beside it, as text a terminal output leaves out
is the stream's (before: the call vanished and its preamble was accepted as the run's answer,
exit 0, the tool never run; ``_said._with_left_out``).

Held as they were (each ending the same way on every protocol, streamed, on both transports):
event streams framed with CR or CRLF line ends (sent whole, or a byte at a time), a byte-order
mark before CRLF framing, comments and ``retry:``/``id:`` fields before every event, events with
no data, an event's JSON split over several ``data:`` lines — each accepted; a finish or stop
reason the protocol does not define (``weird_reason``), a Responses ``incomplete`` with no reason
or one it does not define, and an Anthropic stream whose stop reason never came — each
``model_error`` at once, never ``accepted``, its calls not run; an Anthropic ``error`` event
after ``message_delta`` is retried; a ``retry-after`` that is negative is passed over for the
backoff, one of 10^23 seconds ends the call at once; a 529 with an HTML page and a connection
reset before any answer are retried and the next answer accepted.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, sse
from test_faults_round10 import run_agent

from tether_testing.fake_server import FakeChatServer, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = ("openai-chat", "anthropic", "openai-responses")
KEYS = {
    "openai-chat": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
HOLD_S = 5.0  # how long a stalled body is held: past the call's timeout_s


def model_of(provider: str, url: str, stream: bool, transport: str = "http", **more: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "name": "m-1",
        "base_url": url,
        "streaming": stream,
        "transport": transport,
        "max_retries": 1,
        "timeout_s": 3,
        **more,
    }


def stalling(base: type[FakeChatServer]) -> type[FakeChatServer]:
    """``base``, except that an error answer given as ``body`` is sent as its status line, its
    headers (a length 64 bytes longer than the body) and the body, then held open: the rest of
    the body never comes (a proxy that stalls mid-answer, or a server that hangs after writing
    the start of its error page)."""

    class Stalling(base):  # type: ignore[valid-type,misc]
        async def _answer(self, writer: Any, request: dict[str, Any], reply: Reply) -> bool:
            if reply.status < 300 or reply.body is None:
                return bool(await super()._answer(writer, request, reply))
            head = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
            length = len(reply.body) + 64
            writer.write(f"HTTP/1.1 {reply.status} Error\r\n{head}content-length: {length}\r\n\r\n".encode())
            writer.write(reply.body)
            await writer.drain()
            await asyncio.sleep(HOLD_S)
            return False

    return Stalling


def stalled_error(status: int, **headers: str) -> Reply:
    body = b'{"error": {"message": "see the request", "type": "invalid_request_error"'  # never closed
    return Reply(status=status, body=body, headers={"content-type": "application/json", **headers})


# -- an error status whose body stalls ------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_error_status_whose_body_stalls_is_that_error_named_and_final(
    tmp_path: Path, provider: str, status: int, transport: str
) -> None:
    """A 400 or 401 whose body stalls after its first bytes: the run ends ``model_error`` at
    once, asked once, naming the status and what of its body came (401: the key variable too);
    before, the attempt ran into ``timeout_s``, was retried as a timeout, and the run ended
    "did not complete within 3s (gave up after 2 attempts)"."""
    replies = [stalled_error(status), stalled_error(status), Reply.text(ANSWER)]
    with stalling(SERVERS[provider])(scripted(replies)) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, True, transport))
        asked = len(server.bodies())
    assert (code != 0, out["stop_reason"], asked) == (True, "model_error", 1), out
    assert f"HTTP {status}" in out["message"] and "see the request" in out["message"], out["message"]
    assert "did not complete" not in out["message"], out["message"]
    if status == 401:
        assert KEYS[provider] in out["message"], out["message"]


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_429_whose_body_stalls_waits_its_retry_after_and_the_answer_is_accepted(
    tmp_path: Path, provider: str, transport: str
) -> None:
    """A 429 with ``retry-after: 1`` whose body stalls: retried as a rate limit after the
    second its header says (the trace's retry says so), and the answers that follow are
    accepted; before, the attempt ran into ``timeout_s`` and was retried as a timeout, its
    ``retry-after`` lost."""
    replies = [stalled_error(429, **{"retry-after": "1"}), Reply.calls(ORDER), Reply.text(ANSWER)]
    with stalling(SERVERS[provider])(scripted(replies)) as server:
        code, out, responses = run_agent(tmp_path, model_of(provider, server.url, True, transport))
        asked = len(server.bodies())
    assert (code, out["stop_reason"], out["answer"], asked) == (0, "accepted", ANSWER, 3), out
    assert responses[0]["retries"] == [{"kind": "rate_limited", "attempt": 1, "delay_s": 1.0}], responses[0]
    assert [c["status"] for c in out["calls"]] == ["ok"], out


# -- Responses: a terminal output that leaves the streamed call out ----------------------------------


def only_the_message_in_the_terminal_output(items: list[Any]) -> list[Any]:
    """The terminal response lists the message alone: the call (and reasoning) the stream gave
    whole (``output_item.added``, argument deltas, ``output_item.done``) left out (a proxy
    that rebuilds the final response from its text)."""
    final = items[-1]["response"]
    final["output"] = [o for o in final["output"] if o["type"] == "message"]
    return items


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_call_the_stream_gave_and_the_terminal_output_leaves_out_runs(
    tmp_path: Path, transport: str
) -> None:
    """Text, reasoning and a call streamed whole, the terminal output listing the text alone:
    the call runs, its reasoning is sent back with it, and the next answer is accepted
    (before: the call vanished, and its preamble "Let me read the order." was accepted as the
    run's answer, exit 0, the tool never run). A terminal output that lists them all: the same."""
    for edit in (only_the_message_in_the_terminal_output, None):
        turn = Reply(content="Let me read the order.", reasoning="Read it.", tool_calls=(ORDER,), edit=edit)
        with SERVERS["openai-responses"](scripted([turn, Reply.text(ANSWER)])) as server:
            model = model_of("openai-responses", server.url, True, transport, reasoning_effort="low")
            code, out, _ = run_agent(tmp_path, model)
            bodies = server.bodies()
        assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        kinds = [i.get("type") for i in bodies[1]["input"]]
        assert kinds.count("reasoning") == 1 and kinds.count("function_call_output") == 1, kinds


# -- held: SSE framing ----------------------------------------------------------------------------


def encoded(p: str, items: list[Any]) -> list[bytes]:
    return [sse(p, i) if isinstance(i, dict) else i for i in items]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


FRAMINGS: dict[str, Callable[[str, list[Any]], list[Any]]] = {
    "crlf": lambda p, items: [b.replace(b"\n", b"\r\n") for b in encoded(p, items)],
    "cr": lambda p, items: [b.replace(b"\n", b"\r") for b in encoded(p, items)],
    "cr_a_byte_at_a_time": lambda p, items: bytewise(b"".join(encoded(p, items)).replace(b"\n", b"\r")),
    "crlf_a_byte_at_a_time": lambda p, items: bytewise(b"".join(encoded(p, items)).replace(b"\n", b"\r\n")),
    "bom_then_crlf": lambda p, items: [b"\xef\xbb\xbf" + b"".join(encoded(p, items)).replace(b"\n", b"\r\n")],
    "comments_and_fields": lambda p, items: [
        b": keep-alive\nretry: 3000\nid: 7\n" + b for b in encoded(p, items)
    ],
    "events_without_data": lambda p, items: [b"event: ping\n\n" + b for b in encoded(p, items)],
    "data_over_several_lines": lambda p, items: [
        re.sub(rb"data: (\{.*\})\n", lambda m: b"data: " + m.group(1).replace(b", ", b",\ndata: ") + b"\n", b)
        for b in encoded(p, items)
    ],
}


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_event_stream_framed_any_way_the_standard_allows_is_accepted(
    tmp_path: Path, provider: str, framing: str, transport: str
) -> None:
    frame = FRAMINGS[framing]
    replies = [
        Reply.calls(ORDER, edit=lambda i: frame(provider, i)),
        Reply.text(ANSWER, edit=lambda i: frame(provider, i)),
    ]
    with SERVERS[provider](scripted(replies)) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, True, transport))
        asked = len(server.bodies())
    assert (code, out["stop_reason"], out["answer"], asked) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


# -- held: ends a protocol does not define ---------------------------------------------------------


def walk_dicts(items: list[Any], fn: Callable[[dict[str, Any]], None]) -> list[Any]:
    def walk(value: Any) -> None:
        if isinstance(value, dict):
            fn(value)
            for v in list(value.values()):
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(items)
    return items


def finish_said(provider: str, value: str) -> Callable[[list[Any]], list[Any]]:
    """Every finish the answer states (chat ``finish_reason``, Anthropic ``stop_reason``, the
    Responses terminal ``status``) is ``value``."""

    def fn(d: dict[str, Any]) -> None:
        if provider == "openai-chat" and d.get("finish_reason") is not None:
            d["finish_reason"] = value
        elif provider == "anthropic" and d.get("type") == "message_delta":
            d["delta"]["stop_reason"] = value
        elif provider == "anthropic" and d.get("type") == "message" and d.get("stop_reason"):
            d["stop_reason"] = value
        elif (
            provider == "openai-responses"
            and d.get("object") == "response"
            and d.get("status") == "completed"
        ):
            d["status"] = value

    return lambda items: walk_dicts(items, fn)


def responses_incomplete(reason: str | None) -> Callable[[list[Any]], list[Any]]:
    def edit(items: list[Any]) -> list[Any]:
        final = items[-1].get("response", items[-1])
        final.update(status="incomplete", incomplete_details=None if reason is None else {"reason": reason})
        if "response" in items[-1]:
            items[-1]["type"] = "response.incomplete"
        return items

    return edit


def no_message_delta(items: list[Any]) -> list[Any]:
    return [i for i in items if i.get("type") != "message_delta"]


ODD_ENDS: list[tuple[str, str, Callable[[str], Callable[[list[Any]], list[Any]]], str]] = [
    *[(f"undefined_finish-{p}", p, lambda p: finish_said(p, "weird_reason"), "weird_reason")
      for p in PROVIDERS],
    ("incomplete_without_reason", "openai-responses", lambda p: responses_incomplete(None), "'incomplete'"),
    ("incomplete_undefined_reason", "openai-responses", lambda p: responses_incomplete("max_tool_calls"),
     "max_tool_calls"),
    ("stop_reason_never_came", "anthropic", lambda p: no_message_delta, "None"),
]  # fmt: skip


@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("calls", [False, True])
@pytest.mark.parametrize(("name", "provider", "edit", "said"), ODD_ENDS, ids=[c[0] for c in ODD_ENDS])
def test_a_turn_ended_in_a_way_the_protocol_does_not_define_is_never_accepted(
    tmp_path: Path, name: str, provider: str, edit: Any, said: str, calls: bool, mode: str
) -> None:
    """A finish, stop reason or status the protocol does not define, a Responses ``incomplete``
    without a reason or with one it does not define, a streamed answer whose stop reason never
    came: ``model_error`` at once (asked once, never ``accepted``), the provider's word in the
    message, its calls not run."""
    if name == "stop_reason_never_came" and (mode == "whole" or calls):
        pytest.skip("a stream's event; calls with no stated reason run (finish_problem)")
    turn = Reply.calls(ORDER, edit=edit(provider)) if calls else Reply.text(ANSWER, edit=edit(provider))
    with SERVERS[provider](scripted([turn, turn, Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, mode == "stream"))
        asked = len(server.bodies())
    assert (code != 0, out["stop_reason"], asked) == (True, "model_error", 1), out
    assert "unknown reason" in out["message"] and said in out["message"], out["message"]
    assert out["calls"] == [], out


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_an_anthropic_error_event_after_the_stop_reason_is_retried(tmp_path: Path, transport: str) -> None:
    def error_before_stop(items: list[Any]) -> list[Any]:
        at = next(k for k, i in enumerate(items) if i.get("type") == "message_stop")
        return [
            *items[:at],
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]

    replies = [Reply.text(ANSWER, edit=error_before_stop), Reply.calls(ORDER), Reply.text(ANSWER)]
    with SERVERS["anthropic"](scripted(replies)) as server:
        code, out, responses = run_agent(tmp_path, model_of("anthropic", server.url, True, transport))
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [r["kind"] for r in responses[0]["retries"]] == ["overloaded"], responses[0]


# -- held: HTTP-level faults ------------------------------------------------------------------------


def resetting(base: type[FakeChatServer]) -> type[FakeChatServer]:
    """``base``, except that a reply with the header ``x-reset`` resets the connection (RST,
    not FIN) instead of answering: a server or balancer that accepted the request, then died."""

    class Resetting(base):  # type: ignore[valid-type,misc]
        async def _answer(self, writer: Any, request: dict[str, Any], reply: Reply) -> bool:
            if "x-reset" not in reply.headers:
                return bool(await super()._answer(writer, request, reply))
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False

    return Resetting


HTML_529 = Reply(
    status=529, body=b"<html><title>Overloaded</title></html>", headers={"content-type": "text/html"}
)
RESET = Reply(headers={"x-reset": "1"})
RETRIED: dict[str, tuple[Reply, str]] = {
    "negative_retry_after": (Reply.error(429, "slow down", headers={"retry-after": "-5"}), "rate_limited"),
    "529_html_page": (HTML_529, "overloaded"),
    "connection_reset": (RESET, "connection"),
}


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("fault", sorted(RETRIED))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_transient_http_fault_is_retried_and_the_next_answer_accepted(
    tmp_path: Path, provider: str, fault: str, transport: str
) -> None:
    first, kind = RETRIED[fault]
    replies = [first, Reply.calls(ORDER), Reply.text(ANSWER)]
    with resetting(SERVERS[provider])(scripted(replies)) as server:
        code, out, responses = run_agent(tmp_path, model_of(provider, server.url, True, transport))
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    (retry,) = responses[0]["retries"]
    assert retry["kind"] == kind and 0 <= retry["delay_s"] < 1, retry  # a negative wait: the backoff


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_retry_after_past_any_sane_wait_ends_the_call_at_once(tmp_path: Path, provider: str) -> None:
    huge = Reply.error(429, "slow down", headers={"retry-after": "99999999999999999999999"})
    with SERVERS[provider](scripted([huge, Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, True))
        asked = len(server.bodies())
    assert (code != 0, out["stop_reason"], asked) == (True, "model_error", 1), out
    assert "HTTP 429" in out["message"] and "Retry-After too long" in out["message"], out["message"]
