"""Model faults, round thirty-seven: model servers of each protocol that fail in new ways, driven
as the other rounds are (an agent file naming ``model.provider``, ``tether run`` in process,
streamed and whole, over the SDK transport and plain httpx; and the Python API against a raw
socket server) against real servers on 127.0.0.1 speaking chat completions, the Responses API
and the Anthropic Messages API.

Fixed here:

- a Responses item that asks the client something (``mcp_approval_request``: the server waits
  for the client's approval before it runs an MCP tool) beside text was passed over (it has no
  ``call_id``), so the text, a preamble, was accepted as the final answer (exit 0). An item
  whose type is a ``…_request`` is a call of a kind the run never offers, retried as unusable
  and never accepted (``_said.client_call``); server-run MCP items (``mcp_call``,
  ``mcp_list_tools``) beside text are still accepted;
- a ``retry-after`` the client joined from two headers (a proxy's beside the server's) read two
  HTTP dates as the first alone, and a number beside a date or a word as no wait at all: the
  server was asked again at once, or a wait past ``max_retry_after_s`` was not seen. It is now
  the longest wait any of its values says (``_failures._joined``);
- an error object that says nothing in words read as Python's repr: a Responses ``failed``
  status without an ``error`` said ``failed response: {}``, a FastAPI 422's field errors
  ``[{'loc': …}]``. It now says ``(no error details given)``, each field and its message, or
  the object as JSON (``_failures._said``);
- an HTTP exchange that broke named only its exception's class (``RemoteProtocolError before
  the answer``), so a trace could not tell a malformed status line from a server that hung up:
  its reason is now said (``illegal status line``, ``illegal chunk header``, ``conflicting
  Content-Length headers``), for errors about the server's bytes only: one about tether's own
  request or a proxy still names only its class (it may quote a header or a proxy's password);
- a key variable a secrets file ended with a newline (or spaces around it) failed every try as
  ``connection: LocalProtocolError`` (exit 7); one with a character no header can carry (a
  typographic quote copied with it) ended in an untyped ``UnicodeEncodeError``. Space around a
  key or an extra ``headers`` value is dropped; any other such character is a ``ConfigError``
  naming the variable or header and the character, never the value (``models/_headers``).

Probed, all already honest; pinned here so they stay so (``PINNED``, and the tests after it):
SSE lines ended by CR, LF and CRLF mixed in one stream, a CRLF cut between HTTP chunks, one byte
a chunk, each UTF-8 character cut between chunks, a 70 KB comment, a tab after ``data:``,
``data:`` before ``event:``, unknown fields and a bare ``id``; ``content-encoding: identity`` and
a body gzipped twice as labelled; Azure's first chunk of prompt filter results and no choices,
``[DONE]`` without its space or with a trailing space, a finish after the usage chunk, Anthropic
block indexes with gaps, Responses output items numbered in reverse, a ``null`` text delta;
arguments that never parse (refused, never run); a ``content-length`` beside chunked framing,
a body longer than its length, chunk extensions and trailers, a status line without reason, a
Latin-1 header, a repeated equal length, a head ended by bare LF (accepted); a bad chunk size,
two different lengths, no status line, an ``HTTP/2`` status line, a double space in it (retried,
``ModelError``); protocol pings, empty ``data:`` and bare ``event:`` lines forever (each try cut
at ``timeout_s``).
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, Case, run_case
from test_faults_round13 import WHOLE, RawServer, _ask
from test_faults_round35 import run_turns

from tether.errors import ModelError
from tether.models._failures import retry_after
from tether_testing.fake_server import Pause, Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = sorted(SERVERS)
TRANSPORTS = ["sdk", "http"]
MODES = ["stream", "whole"]


def http_date(seconds: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)


# -- fixed: a Responses item that asks the client something is no final answer ----------------

APPROVAL = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "server_label": "orders",
    "name": "read_order",
    "arguments": '{"order_id": "742"}',
}
MCP_CALL = {
    "type": "mcp_call",
    "id": "mcp_1",
    "server_label": "orders",
    "name": "lookup",
    "arguments": "{}",
    "output": "open",
}
MCP_LIST = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "orders", "tools": []}


def with_item(item: dict[str, Any], *, events_only: bool = False) -> Callable[[list[Any]], list[Any]]:
    """The answer with ``item`` before its message: in the whole body's output, or in a stream's
    terminal output (``events_only``: as ``output_item.added`` and ``.done`` events alone)."""

    def edit(items: list[Any]) -> list[Any]:
        items = copy.deepcopy(items)
        if "output" in items[0]:  # a whole answer
            items[0]["output"].insert(0, item)
            return items
        if not events_only:
            items[-1]["response"]["output"].insert(0, item)
            return items
        added = {"type": "response.output_item.added", "output_index": 9, "item": item}
        return [items[0], added, {**added, "type": "response.output_item.done"}, *items[1:]]

    return edit


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("mode", "events_only"),
    [("stream", False), ("stream", True), ("whole", False)],
    ids=["listed", "events", "whole"],
)
def test_an_approval_request_beside_text_is_no_final_answer(
    tmp_path: Path, mode: str, events_only: bool, transport: str
) -> None:
    """Each try answers text beside an ``mcp_approval_request``: the run gives up (exit 7,
    ``model_error``) naming the item (before: the text accepted, exit 0)."""
    reply = Reply.text(ANSWER, edit=with_item(APPROVAL, events_only=events_only))
    how = {"mode": mode, "transport": transport}
    code, out, bodies = run_turns(tmp_path, "openai-responses", [reply, reply, Reply.text(ANSWER)], **how)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (7, "model_error", None, 2), out
    assert "mcp_approval_request item (id 'mcpr_1')" in out["message"], out["message"]
    assert "does not offer" in out["message"], out["message"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("item", [MCP_CALL, MCP_LIST], ids=["mcp_call", "mcp_list_tools"])
def test_server_run_mcp_items_beside_text_are_still_accepted(
    tmp_path: Path, item: dict[str, Any], mode: str, transport: str
) -> None:
    """The legitimate side: items of tools the server ran itself, beside the answer."""
    replies = [Reply.calls(ORDER), Reply.text(ANSWER, edit=with_item(item))]
    code, out, bodies = run_turns(tmp_path, "openai-responses", replies, mode=mode, transport=transport)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out


# -- fixed: a retry-after joined from two headers waits the longest of its values ------------


def test_a_joined_retry_after_reads_every_value() -> None:
    """Two dates (each with its own comma), a number beside a date or a word, in either order:
    the longest wait any says; none that says one is no wait (``None``)."""
    soon, later = http_date(100), http_date(1000)
    cases = {
        f"{soon}, {later}": 1000,
        f"{later}, {soon}": 1000,
        f"30, {later}": 1000,
        f"{soon}, 3000": 3000,
        "abc, 30": 30,
        "30, abc": 30,
        "5, 30": 30,
        f"{soon},{later}": 1000,
        "Sunday, 06-Nov-94 08:49:37 GMT, 7": 7,  # RFC 850 date, passed: 0
    }
    for value, seconds in cases.items():
        wait = retry_after({"retry-after": value})
        assert wait is not None and seconds - 5 < wait <= seconds, (value, wait)
    for value in ("nan, -1", "abc, def", ""):
        assert retry_after({"retry-after": value}) is None, value
    assert retry_after({"retry-after-ms": "x, 3000"}) == 3.0
    assert retry_after({"retry-after": "12"}) == 12.0  # the usual single value, as before


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "joined",
    [lambda: f"1, {http_date(7200)}", lambda: f"{http_date(1)}, {http_date(7200)}", lambda: "soon, 7200"],
    ids=["number-date", "date-date", "word-number"],
)
def test_a_joined_retry_after_too_long_ends_the_call_at_once(
    tmp_path: Path, provider: str, transport: str, joined: Callable[[], str]
) -> None:
    """A 503 whose joined ``retry-after`` holds a wait of two hours: the call ends at once,
    asked once (before: the short value or none was read and the server asked again)."""
    busy = Reply(status=503, body=b"busy", headers={"retry-after": joined()})
    case = Case("joined", lambda p, s: [busy, Reply.text(ANSWER)], False, modes=("whole",))
    code, out, requests, _ = run_case(tmp_path, provider, case, "whole", transport)
    assert (code, out["stop_reason"], requests) == (7, "model_error", 1), out
    assert "Retry-After too long" in out["message"], out["message"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_joined_retry_after_that_has_passed_is_retried_and_answered(tmp_path: Path, provider: str) -> None:
    """The legitimate side: two dates already passed: retried at once, the answer accepted."""
    busy = Reply(status=503, body=b"busy", headers={"retry-after": f"{http_date(-60)}, {http_date(-30)}"})
    case = Case("passed", lambda p, s: [busy, Reply.calls(ORDER), Reply.text(ANSWER)], True, modes=("whole",))
    code, out, requests, _ = run_case(tmp_path, provider, case, "whole", "http")
    assert (code, out["stop_reason"], out["answer"], requests) == (0, "accepted", ANSWER, 3), out


# -- fixed: an error object that says nothing in words is not shown as Python's repr ---------


def failed_without_error(items: list[Any]) -> list[Any]:
    final = items[-1]["response"] if "response" in items[-1] else items[-1]
    final.update(status="failed", output=[], error=None)
    if "response" in items[-1]:
        items[-1]["type"] = "response.failed"
    return items


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
def test_a_failed_response_without_an_error_says_so(tmp_path: Path, mode: str, transport: str) -> None:
    reply = Reply.text(ANSWER, edit=failed_without_error)
    how = {"mode": mode, "transport": transport}
    code, out, bodies = run_turns(tmp_path, "openai-responses", [reply, reply], **how)
    assert (code, out["stop_reason"], len(bodies)) == (7, "model_error", 2), out
    assert "a failed response: (no error details given)" in out["message"], out["message"]
    assert "{}" not in out["message"], out["message"]


FIELD_ERRORS = {
    "detail": [
        {"loc": ["body", "messages", 0, "content"], "msg": "field required", "type": "missing"},
        {"loc": ["body", "max_tokens"], "msg": "ensure this value is greater than 0", "type": "gt"},
    ]
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("body", "said"),
    [
        (FIELD_ERRORS, "body.messages.0.content: field required; body.max_tokens: ensure this value"),
        ({"error": {"code": "bad_model", "param": "model"}}, '{"code": "bad_model", "param": "model"}'),
        ({"error": {}}, "(no error details given)"),
    ],
    ids=["fastapi-fields", "no-message", "empty"],
)
def test_an_error_body_without_words_is_said_plainly(
    tmp_path: Path, provider: str, transport: str, body: dict[str, Any], said: str
) -> None:
    """A 422 in FastAPI's shape, an error object with no message, an empty one: final at once,
    said as fields and messages or as JSON (before: Python's repr, ``[{'loc': …}]``)."""
    page = Reply(status=422, body=json.dumps(body).encode(), headers={"content-type": "application/json"})
    case = Case("422", lambda p, s: [page, Reply.text(ANSWER)], False, modes=("whole",))
    code, out, requests, _ = run_case(tmp_path, provider, case, "whole", transport)
    assert (code, out["stop_reason"], requests) == (7, "model_error", 1), out
    assert "HTTP 422" in out["message"] and said in out["message"], out["message"]
    assert "{'" not in out["message"], out["message"]


# -- fixed: a broken HTTP exchange says why ----------------------------------------------------

Make = Callable[[bytes], bytes]
OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


def sized(body: bytes, head: bytes = OK_HEAD) -> bytes:
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


def chunked(body: bytes, size: bytes = b"", ext: bytes = b"", trailer: bytes = b"") -> bytes:
    return b"%s%s\r\n%s\r\n0\r\n%s\r\n" % (size or b"%x" % len(body), ext, body, trailer)


def raw(make: Make, provider: str) -> Any:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
        writer.write(make(json.dumps(WHOLE[provider]).encode()))
        await writer.drain()
        await asyncio.sleep(0.1)

    return handler


BROKEN: list[tuple[str, Make, str]] = [
    ("bad-chunk-size", lambda b: OK_HEAD + b"transfer-encoding: chunked\r\n\r\n" + chunked(b, b"zz"),
     "illegal chunk header"),
    ("two-lengths", lambda b: sized(b, OK_HEAD + b"content-length: 3\r\n"), "conflicting Content-Length"),
    ("http2-status-line", lambda b: sized(b, b"HTTP/2 200 OK\r\n"), "illegal status line"),
    ("double-space-status", lambda b: sized(b, b"HTTP/1.1  200 OK\r\n"), "illegal status line"),
    ("no-status-line", lambda b: b, "Server disconnected without sending a response"),
]  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("make", "said"), [(m, s) for _, m, s in BROKEN], ids=[n for n, _, _ in BROKEN])
async def test_a_broken_exchange_says_why(provider: str, transport: str, make: Make, said: str) -> None:
    """Each try broken the same way: retried, then ``ModelError`` naming the HTTP library's
    reason (before: only ``RemoteProtocolError``)."""
    with RawServer(raw(make, provider)) as server, pytest.raises(ModelError) as caught:
        await _ask(provider, transport, server.url, timeout_s=3)
    assert server.requests == 2 and "gave up after 2 attempts" in str(caught.value), caught.value
    assert "RemoteProtocolError" in str(caught.value) and said in str(caught.value), caught.value


def test_an_error_about_the_request_never_quotes_it() -> None:
    """The HTTP library's reason is said for errors about the server's bytes or the connection;
    one about the request tether wrote (``LocalProtocolError`` quotes the header, key and all)
    or a proxy (its URL may hold a password) names its class only."""
    import httpx2

    from tether.models._failures import Failures

    secret = "Illegal header value b'Bearer sk-round37-SECRET\\n'"
    for err in (httpx2.LocalProtocolError(secret), httpx2.ProxyError(f"http://u:SECRET@proxy {secret}")):
        said = str(Failures.transport(err, "before the answer"))
        assert "SECRET" not in said and type(err).__name__ in said, said
    said = str(Failures.transport(httpx2.RemoteProtocolError("illegal status line: b'HTTP/2 200'"), "here"))
    assert said.endswith("RemoteProtocolError here: illegal status line: b'HTTP/2 200'"), said


# -- PINNED: framing, HTTP and timing oddities that already end honestly -----------------------


def encoded(provider: str, item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if provider == "openai-chat":
        return b"data: " + json.dumps(item).encode() + b"\n\n"
    return f"event: {item.get('type')}\ndata: {json.dumps(item)}\n\n".encode()


Framing = Callable[[bytes], list[bytes]]


def mixed_endings(data: bytes) -> list[bytes]:
    ends = [b"\r\n", b"\n", b"\r"]
    events = [e for e in data.split(b"\n\n") if e]
    return [b"".join(e.replace(b"\n", ends[n % 3]) + ends[n % 3] * 2 for n, e in enumerate(events))]


def crlf_cut_between_chunks(data: bytes) -> list[bytes]:
    pieces = data.replace(b"\n", b"\r\n").split(b"\r")
    return [p + b"\r" for p in pieces[:-1]] + [pieces[-1]]


def utf8_cut_between_chunks(data: bytes) -> list[bytes]:
    out, at = [], 0
    for n, byte in enumerate(data):
        if byte >= 0xC0:  # a character's lead byte: the chunk ends right after it
            out.append(data[at : n + 1])
            at = n + 1
    return [*out, data[at:]]


def data_before_event(data: bytes) -> list[bytes]:
    events = [
        b"\n".join(sorted(e.split(b"\n"), key=lambda line: not line.startswith(b"data")))
        for e in data.split(b"\n\n")
    ]
    return [b"\n\n".join(events)]


FRAMINGS: dict[str, Framing] = {
    "mixed-line-ends": mixed_endings,
    "crlf-cut-between-chunks": crlf_cut_between_chunks,
    "a-byte-a-chunk": lambda d: [d[i : i + 1] for i in range(len(d))],
    "utf8-cut-between-chunks": utf8_cut_between_chunks,
    "70kb-comment-first": lambda d: [b": " + b"x" * 70_000 + b"\n\n", d],
    "tab-after-data": lambda d: [d.replace(b"data: ", b"data:\t")],
    "data-before-event": data_before_event,
    "unknown-fields": lambda d: [d.replace(b"data: ", b"foo: bar\nid\nretry: soon\ndata: ")],
}


def framed(provider: str, framing: Framing) -> Callable[[list[Any]], list[Any]]:
    return lambda items: list(framing(b"".join(encoded(provider, i) for i in items)))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("framing", list(FRAMINGS.values()), ids=list(FRAMINGS))
def test_pinned_sse_framing_is_read(tmp_path: Path, framing: Framing, provider: str, transport: str) -> None:
    edit = framed(provider, framing)
    replies = [Reply.calls(ORDER, edit=edit), Reply.text(ANSWER, edit=edit)]
    code, out, bodies = run_turns(tmp_path, provider, replies, transport=transport)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


def azure_filter_chunk_first(items: list[Any]) -> list[Any]:
    results = [{"prompt_index": 0, "content_filter_results": {}}]
    return [
        {"id": "", "object": "", "created": 0, "model": "", "choices": [], "prompt_filter_results": results},
        *items,
    ]


def done_as(wire: bytes) -> Callable[[list[Any]], list[Any]]:
    return lambda items: [wire if i == b"data: [DONE]\n\n" else i for i in items]


def finish_after_usage(items: list[Any]) -> list[Any]:
    def finishing(i: Any) -> bool:
        return isinstance(i, dict) and bool(i.get("choices")) and bool(i["choices"][0].get("finish_reason"))

    finish = [i for i in items if finishing(i)]
    rest = [i for i in items if not finishing(i)]
    return [*rest[:-1], *finish, rest[-1]]  # after the usage chunk, before ``[DONE]``


def block_indexes_with_gaps(items: list[Any]) -> list[Any]:
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("index"), int):
            item["index"] = item["index"] * 2 + 1
    return items


def reversed_output(items: list[Any]) -> list[Any]:
    if "output" in items[0]:
        items[0]["output"].reverse()
        return items
    for item in items:
        if isinstance(item, dict) and "output_index" in item:
            item["output_index"] = 1 - item["output_index"]
    return items


def null_text_delta(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        out.append(item)
        if isinstance(item, dict) and item.get("type") == "response.output_text.delta":
            out.append({**item, "delta": None})
    return out


# (name, provider or all, modes, the edit of both turns)
QUIRKS: list[tuple[str, str | None, tuple[str, ...], Callable[[list[Any]], list[Any]]]] = [
    ("azure-filter-chunk-first", "openai-chat", ("stream",), azure_filter_chunk_first),
    ("done-without-space", "openai-chat", ("stream",), done_as(b"data:[DONE]\n\n")),
    ("done-trailing-space-crlf", "openai-chat", ("stream",), done_as(b"data: [DONE] \r\n\r\n")),
    ("finish-after-usage", "openai-chat", ("stream",), finish_after_usage),
    ("block-indexes-with-gaps", "anthropic", ("stream", "whole"), block_indexes_with_gaps),
    ("output-numbered-in-reverse", "openai-responses", ("stream", "whole"), reversed_output),
    ("null-text-delta", "openai-responses", ("stream",), null_text_delta),
]
QUIRK_PARAMS = [
    pytest.param(edit, provider, mode, transport, id=f"{name}-{provider}-{mode}-{transport}")
    for name, only, modes, edit in QUIRKS
    for provider in PROVIDERS
    if only in (None, provider)
    for mode in modes
    for transport in TRANSPORTS
]


@pytest.mark.parametrize(("edit", "provider", "mode", "transport"), QUIRK_PARAMS)
def test_pinned_protocol_quirks_are_accepted(
    tmp_path: Path, edit: Callable[[list[Any]], list[Any]], provider: str, mode: str, transport: str
) -> None:
    replies = [Reply(content="Let me look.", tool_calls=(ORDER,), edit=edit), Reply.text(ANSWER, edit=edit)]
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode, transport=transport)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_pinned_arguments_that_never_parse_are_refused_not_run(
    tmp_path: Path, provider: str, mode: str, transport: str
) -> None:
    """A call whose argument text never closes (Anthropic's ``input_json_delta`` pieces, a chat or
    Responses argument string): refused, never run, the run flagged (exit 2)."""
    if provider == "anthropic" and mode == "whole":
        pytest.skip("a whole Anthropic answer carries its input as an object")
    replies = [Reply.calls(("read_order", '{"order_id": "742"')), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode, transport=transport)
    assert (code, out["answer"], len(bodies)) == (2, ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["rejected"], out
    assert "invalid_json" in out["message"], out["message"]


ACCEPTED_RAW: dict[str, Make] = {
    "length-beside-chunked": lambda b: (
        OK_HEAD + b"content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(b)
    ),
    "body-past-its-length": lambda b: sized(b) + b"\n\n   trailing",
    "chunk-extension-and-trailer": lambda b: (
        OK_HEAD
        + b"transfer-encoding: chunked\r\n\r\n"
        + chunked(b, ext=b";name=value", trailer=b"x-trailer: 1\r\n")
    ),
    "status-without-reason": lambda b: sized(b, b"HTTP/1.1 200\r\ncontent-type: application/json\r\n"),
    "latin1-header": lambda b: sized(b, OK_HEAD + b"x-request-id: caf\xe9\r\n"),
    "equal-lengths-twice": lambda b: sized(b, OK_HEAD + b"content-length: %d\r\n" % len(b)),
    "head-ended-by-lf": lambda b: sized(b).replace(b"\r\n", b"\n"),
    "gzip-twice-as-labelled": lambda b: sized(
        gzip.compress(gzip.compress(b)), OK_HEAD + b"content-encoding: gzip, gzip\r\n"
    ),
    "identity-coding": lambda b: sized(b, OK_HEAD + b"content-encoding: identity\r\n"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("make", list(ACCEPTED_RAW.values()), ids=list(ACCEPTED_RAW))
async def test_pinned_http_oddities_a_client_reads_are_accepted(
    provider: str, transport: str, make: Make
) -> None:
    with RawServer(raw(make, provider)) as server:
        response = await _ask(provider, transport, server.url, timeout_s=3)
    assert (response.message.content, server.requests) == (ANSWER, 1)


PINGS = {
    "openai-chat": b": keep-alive\n\n",
    "anthropic": b'event: ping\ndata: {"type": "ping"}\n\n',
    "openai-responses": b'event: response.in_progress\ndata: {"type": "response.in_progress", '
    b'"response": {"id": "r", "status": "in_progress", "output": []}}\n\n',
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("kind", ["protocol-ping", "empty-data", "bare-event"])
def test_pinned_idle_events_forever_are_cut_at_the_timeout(
    tmp_path: Path, kind: str, provider: str, transport: str
) -> None:
    """A stream that begins, then sends an idle event every 0.2 s forever (never a read timeout):
    each try is cut at ``timeout_s``, retried, then ``model_error`` (never a hang)."""
    piece = {"protocol-ping": PINGS[provider], "empty-data": b"data:\n\n", "bare-event": b"event: ping\n\n"}[
        kind
    ]
    idle = Reply.text(
        ANSWER, edit=lambda items: [*items[:2], *[x for _ in range(100) for x in (piece, Pause(0.2))]]
    )
    case = Case(
        "idle", lambda p, s: [idle, idle, Reply.text(ANSWER)], False, modes=("stream",), timeout_s=1.0
    )
    code, out, requests, _ = run_case(tmp_path, provider, case, "stream", transport)
    assert (code, out["stop_reason"], requests) == (7, "model_error", 2), out
    assert "did not complete within 1s" in out["message"], out["message"]


# -- fixed: a key or header value an HTTP header cannot carry -----------------------------------


def run_keyed(tmp_path: Path, provider: str, transport: str, key: str) -> tuple[int, str, list[Any]]:
    """``tether run --agent`` with ``$ROUND37_KEY`` set to ``key``: exit code, what it printed,
    the requests the server received."""
    import contextlib
    import io
    import os

    from test_faults_heldout import write_agent

    from tether.cli import main
    from tether_testing.fake_server import scripted

    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        model = {"provider": provider, "name": "m-1", "base_url": server.url, "api_key_env": "ROUND37_KEY"}
        path = write_agent(tmp_path, {**model, "transport": transport, "timeout_s": 3, "max_retries": 1})
        out, err = io.StringIO(), io.StringIO()
        old = os.environ.get("ROUND37_KEY")
        os.environ["ROUND37_KEY"] = key
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        finally:
            os.environ.pop("ROUND37_KEY") if old is None else os.environ.update(ROUND37_KEY=old)
        return code, out.getvalue() + err.getvalue(), server.received


def key_header(provider: str, headers: dict[str, str]) -> str:
    """The key as the request carried it (Anthropic's ``x-api-key``, or a bearer token)."""
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("key", ["sk-round37-key\n", "  sk-round37-key \r\n"], ids=["newline", "spaces"])
def test_a_key_a_secrets_file_ended_with_a_newline_is_sent_without_it(
    tmp_path: Path, provider: str, transport: str, key: str
) -> None:
    """A key variable read from a file (its last newline kept): the run is answered, the key sent
    without the space around it (before: every try failed ``LocalProtocolError``, exit 7)."""
    code, printed, received = run_keyed(tmp_path, provider, transport, key)
    assert code == 0 and len(received) == 2, printed
    assert {key_header(provider, r.headers) for r in received} == {"sk-round37-key"}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("key", "said"),
    [("\u201csk-round37-SECRET\u201d", "U+201C (LEFT DOUBLE QUOTATION MARK) at position 1"),
     ("sk-round37-\nSECRET", "U+000A (a control character) at position 12")],
    ids=["typographic-quotes", "inner-newline"],
)  # fmt: skip
def test_a_key_no_header_can_carry_is_a_config_error_naming_the_variable(
    tmp_path: Path, provider: str, transport: str, key: str, said: str
) -> None:
    """A key copied with typographic quotes, or broken by a newline: the run stops before any
    request, naming the variable and the character, never the key (before: an untyped
    ``UnicodeEncodeError`` crash, or a ``connection`` error retried on every try)."""
    code, printed, received = run_keyed(tmp_path, provider, transport, key)
    assert code not in (0, 7) and received == [], (code, printed)
    assert f"$ROUND37_KEY holds {said}" in printed and "SECRET" not in printed, printed
    assert "Traceback" not in printed, printed


def test_extra_headers_are_checked_where_they_are_read() -> None:
    """The Python API's ``headers``: space around a value dropped; a control or non-ASCII
    character in a value, or a name that is no header name, a ``ConfigError`` naming the header
    only (the value may be a token)."""
    from tether.errors import ConfigError
    from tether.models import OpenAICompatible

    url = "http://127.0.0.1:9/v1"
    model = OpenAICompatible("m-1", base_url=url, headers={"X-Org": " team-7\n", "X-Tab": "a\tb"})
    assert model.headers == {"X-Org": "team-7", "X-Tab": "a\tb"}
    for headers, said in (
        ({"X-Token": "tok-SECRET\r\nX-Evil: 1"}, "the value of X-Token holds U+000D"),
        ({"X-Token": "tok-\u00e9-SECRET"}, "the value of X-Token holds U+00E9"),
        ({"X Token": "x"}, "'X Token' is not a header name"),
    ):
        with pytest.raises(ConfigError) as caught:
            OpenAICompatible("m-1", base_url=url, headers=headers)
        assert said in str(caught.value) and "SECRET" not in str(caught.value), caught.value
