"""A seventh round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking chat completions, the Anthropic Messages API
or the OpenAI Responses API; each case runs where its path differs (``Round4.at``).

Variants end ``accepted`` with the answer: tool calls whose finish says ``stop`` (``end_turn``),
as many servers send; a Responses stream whose items come only as
``output_item.added`` and deltas (no ``output_item.done``, the terminal event's output empty);
a Responses call done with its arguments re-encoded (the same JSON, spaced otherwise); an
Anthropic ``tool_use`` whose input comes whole in ``content_block_start`` and again as deltas
(read once, not twice); a chat tool call whose name comes after its arguments; tool arguments
with multibyte characters cut across HTTP chunks; every SSE framing at once (a byte-order mark,
``\\r`` line ends, one event's JSON over several ``data:`` lines with a comment between them,
``id:`` and ``retry:`` fields).

Faults end with a typed stop and a non-zero exit: a finish that says the turn calls tools when
none came (chat ``tool_calls``, Anthropic ``tool_use``: the text is a preamble, no answer);
Responses argument deltas that disagree with the arguments the call is done with; a gzip bomb
(refused at ``max_response_bytes``, never inflated whole); an error answer whose body is
larger than anyone needs and held open (read up to 64 kB on the SDK transport too, as on
``http``, not waited out); a server that drips a whole answer
slower than ``timeout_s`` (each read well inside it), one that sends its headers and stalls, one
that stalls between events: each try cut at ``timeout_s``, on both transports. And a chat usage
chunk that zeroes the counts after an earlier one does not take them back.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, BOM, ORDER, good, run_case, twice, write_agent
from test_faults_round3 import OTHER, assert_outcome, walk
from test_faults_round4 import SERVERS4, Raw, Round4, encode_raw, head_body, round_params

from tether.cli import main
from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- edits ---------------------------------------------------------------------------------------


def deltas_only(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: no ``output_item.done`` events and no output in the terminal event: the items
    are what ``output_item.added`` and the deltas say."""
    out = [i for i in items if not (isinstance(i, dict) and i.get("type") == "response.output_item.done")]
    out[-1]["response"]["output"] = []
    return out


def arguments_done_as(arguments: str) -> Callable[[str, bool, list[Any]], list[Any]]:
    """Responses: the call's arguments, as the call is done with them (``arguments.done``, the
    done item, the terminal output), are ``arguments``; the deltas say what they said."""

    def fix(d: dict[str, Any]) -> None:
        if d.get("type") in ("function_call", "response.function_call_arguments.done"):
            d["arguments"] = arguments

    def edit(p: str, stream: bool, items: list[Any]) -> list[Any]:
        return walk(items, fix)

    return edit


COMPACT = json.dumps(json.loads(ORDER[1]), separators=(",", ":"))


def input_in_start_and_deltas(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: the ``tool_use`` input whole in ``content_block_start`` and again as deltas."""
    for i in items:
        if (
            isinstance(i, dict)
            and i.get("type") == "content_block_start"
            and i["content_block"].get("type") == "tool_use"
        ):
            i["content_block"]["input"] = json.loads(ORDER[1])
    return items


def name_after_arguments(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: the call's first delta has its id and no name; the name comes after the arguments."""
    out: list[Any] = []
    held: list[Any] = []  # the delta with the name, until the arguments are sent
    for i in items:
        if not isinstance(i, dict):
            out.append(i)
            continue
        calls = [c for ch in i.get("choices") or () for c in (ch.get("delta") or {}).get("tool_calls") or ()]
        if not held and calls and calls[0]["function"].get("name"):
            name = {"index": calls[0]["index"], "function": {"name": calls[0]["function"].pop("name")}}
            held.append(
                {**i, "choices": [{"index": 0, "delta": {"tool_calls": [name]}, "finish_reason": None}]}
            )
        elif held and held[-1] is not None and not calls:
            out.append(held[-1])
            held.append(None)
        out.append(i)
    return out


MULTIBYTE = ("read_order", '{"order_id": "742 — ✓ 👍🏽"}')  # sent as raw UTF-8, 3 bytes an HTTP chunk


def every_framing(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Each event with ``id:`` and ``retry:`` fields, its JSON over several ``data:`` lines with
    a comment after the first, every line ended by ``\\r`` alone; a byte-order mark first."""
    out: list[Any] = [BOM]
    for n, i in enumerate(items):
        if not isinstance(i, dict):
            out.append(i.replace(b"\n", b"\r"))
            continue
        first, *rest = json.dumps(i, indent=1).split("\n")
        head = "" if p == "openai-chat" else f"event: {i.get('type')}\r"
        lines = [
            f"id: {n}",
            "retry: 1000",
            f"{head}data: {first}",
            ": a comment",
            *(f"data: {r}" for r in rest),
        ]
        out.append(("\r".join(lines) + "\r\r").encode())
    return out


@functools.cache
def bomb() -> bytes:
    """40 MB of spaces gzip-compressed (about 40 kB): past the default ``max_response_bytes``."""
    return gzip.compress(b" " * 40_000_000, compresslevel=1)


def gzip_bomb(data: bytes) -> bytes:
    head, _ = head_body(data)
    head = b"\r\n".join(
        h for h in head.split(b"\r\n") if not h.lower().startswith((b"content-length", b"transfer-encoding"))
    )
    return head + b"\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(bomb()) + bomb()


def error_body_held_open(data: bytes) -> bytes:
    """A 503 that declares a 10 MB body, sends 200 kB of it and holds the connection open (a
    reader that takes an error body whole waits out the timeout; one that takes 64 kB has
    what it needs)."""
    head = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 10000000"
    return head + b"\r\n\r\n" + b"busy " * 40_000


def dripped(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The whole answer, a pause of 0.15 s before each event (each read well inside the 0.5 s
    timeout, the whole far past it)."""
    return [x for i in items for x in (Pause(0.15), i)]


def headers_then_stall(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [Pause(2), *items]


def stall_between_events(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [*items[:2], Pause(2), *items[2:]]


def edited(edit: Callable[[str, bool, list[Any]], list[Any]], **kw: Any) -> Callable[[str, bool], Reply]:
    return lambda p, s: Reply.text(ANSWER, edit=lambda items: edit(p, s, items), **kw)


STREAMS = ("chat/stream/http", "chat/stream/sdk", "anthropic/stream/http", "anthropic/stream/sdk",
           "responses/stream/http", "responses/stream/sdk")  # fmt: skip
SLOW = ("did not complete within 0.5s", "gave up")

CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4("responses_items_only_as_added_and_deltas", good(edit=deltas_only), True,
           at=("responses/stream/http", "responses/stream/sdk")),
    Round4("responses_arguments_done_reencoded", good(edit=arguments_done_as(COMPACT)), True,
           at=("responses/stream/http",)),
    Round4("anthropic_input_in_block_start_and_as_deltas", good(edit=input_in_start_and_deltas), True,
           at=("anthropic/stream/http", "anthropic/stream/sdk")),
    Round4("chat_tool_name_after_its_arguments", good(edit=name_after_arguments), True,
           at=("chat/stream/http", "chat/stream/sdk")),
    Round4("multibyte_arguments_cut_across_http_chunks", lambda p, s: [
        Reply.calls(MULTIBYTE, chunks=7, http_chunk=3, edit=lambda i: encode_raw(p, s, i)),
        Reply.text(ANSWER, http_chunk=3, edit=lambda i: encode_raw(p, s, i))], True,
           at=("chat/stream/http", "anthropic/stream/sdk", "responses/stream/http", "responses/whole/sdk")),
    Round4("every_sse_framing_at_once", good(edit=every_framing), True,
           at=("chat/stream/http", "anthropic/stream/sdk", "responses/stream/http")),
    Round4("tool_calls_with_a_normal_finish", lambda p, s: [
        Reply.calls(ORDER, finish_reason="end_turn" if p == "anthropic" else "stop"), Reply.text(ANSWER)],
           True,
           at=("chat/stream/http", "chat/whole/sdk", "anthropic/whole/http", "anthropic/stream/sdk")),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4("finish_says_tool_calls_but_none_came", twice(lambda p, s: Reply.text(
        "Let me look that up.", finish_reason="tool_use" if p == "anthropic" else "tool_calls")), False,
           ("calls tools, but it has none", "gave up"),
           at=("chat/stream/http", "chat/whole/sdk", "anthropic/stream/sdk", "anthropic/whole/http")),
    Round4("responses_arguments_done_disagree_with_deltas", twice(lambda p, s: Reply.calls(
        ORDER, edit=lambda items: arguments_done_as(OTHER[1])(p, s, items))), False,
           ("are done as", "gave up"), at=("responses/stream/http", "responses/stream/sdk")),
    Round4("gzip_bomb", twice(lambda p, s: Raw(content=ANSWER, wire=gzip_bomb)), False,
           ("larger than max_response_bytes",),
           at=("chat/whole/http", "chat/stream/sdk", "anthropic/stream/http", "responses/whole/sdk")),
    Round4("error_body_past_the_limit_held_open", twice(lambda p, s: Raw(
        status=503, body=b"busy", wire=error_body_held_open, keep=True)), False, ("HTTP 503", "gave up"),
           timeout_s=1.0,
           at=("chat/whole/sdk", "anthropic/stream/sdk", "responses/whole/sdk", "chat/whole/http")),
    Round4("drips_a_whole_answer_slower_than_the_timeout", twice(edited(dripped)), False, SLOW, timeout_s=0.5,
           at=STREAMS),
    Round4("headers_then_stalls", twice(edited(headers_then_stall)), False, SLOW, timeout_s=0.5,
           at=("chat/whole/sdk", "anthropic/whole/http", "responses/whole/http", "chat/stream/http",
               "anthropic/stream/sdk", "responses/stream/sdk")),
    Round4("stalls_between_events", twice(edited(stall_between_events)), False, SLOW, timeout_s=0.5,
           at=("chat/stream/sdk", "anthropic/stream/http", "responses/stream/http")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round7_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert_outcome(case, code, out, requests, took)
    if case.said == SLOW:  # each try cut at timeout_s: two tries, not the run's deadline
        assert took < 2 * case.timeout_s + 3, took
    if case.name.startswith("multibyte"):  # the tool got the arguments whole, every character
        lines = [
            line for f in tmp_path.rglob("*.jsonl") for line in f.read_text("utf-8").splitlines() if line
        ]
        assert any(json.loads(MULTIBYTE[1])["order_id"] in json.dumps(json.loads(x), ensure_ascii=False)
                   for x in lines)  # fmt: skip


def zeroed_later(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: after the usage chunk, another whose counts are all 0 (a proxy that appends its
    own usage chunk, filling what it does not know with 0)."""
    at = next(n for n, i in enumerate(items) if isinstance(i, dict) and i.get("usage"))
    zero = {**items[at], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return [*items[: at + 1], zero, *items[at + 1 :]]


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_chat_usage_chunk_that_zeroes_the_counts_does_not_take_them_back(
    tmp_path: Any, transport: str
) -> None:
    """Each turn read 100 prompt tokens and wrote 10; a later usage chunk that says 0 does not
    take them back: the run's two turns count 220 tokens, not 0 (a token budget would never
    have been spent)."""
    case = Round4("chat_usage_zeroed_later", good(edit=zeroed_later), True)
    code, out, requests, _ = run_case(tmp_path, "openai-chat", case, "stream", transport, servers=SERVERS4)
    assert (code, out["stop_reason"], requests, out["answer"]) == (0, "accepted", 2, ANSWER), out
    assert out["tokens"] == 2 * (100 + 10), out


class _Gzipped:
    def __init__(self, raw: bytes) -> None:
        self.headers = {"content-encoding": "gzip"}
        self._raw = raw

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self._raw), 65536):
            yield self._raw[at : at + 65536]


@pytest.mark.anyio
async def test_a_gzip_bomb_is_inflated_in_bounded_pieces_and_a_body_of_members_whole() -> None:
    """8 MB of zeros in one 8 kB block comes out in pieces of at most 256 kB (the size limit
    stops it after the first past the limit, never holding it whole); a body of several
    members, each inflating past a piece, still comes out whole."""
    from tether.models._sse import decoded

    pieces = [len(p) async for p in decoded(_Gzipped(gzip.compress(bytes(8_000_000))))]
    assert sum(pieces) == 8_000_000 and max(pieces) <= 256 * 1024, max(pieces)
    parts = [bytes([65 + n]) * 700_000 for n in range(3)]
    body = b"".join(gzip.compress(p) for p in parts)
    assert b"".join([p async for p in decoded(_Gzipped(body))]) == b"".join(parts)


class _Blanks:
    """A body of nothing but blanks, in 64 kB blocks (no content-encoding)."""

    def __init__(self, size: int) -> None:
        self.headers: dict[str, str] = {}
        self.size = size

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for _ in range(0, self.size, 65536):
            yield b" " * 65536


@pytest.mark.anyio
async def test_blanks_before_the_first_telling_byte_count_against_the_size_limit() -> None:
    """What is read to tell a stream from a document is bounded as the rest is: 2 MB of blanks
    against a 1 MB limit is refused (it was held whole, however long); blanks then an answer,
    under the limit, are still told and kept."""
    from tether.errors import ModelError
    from tether.models._backend import _Peeked

    with pytest.raises(ModelError, match="larger than max_response_bytes"):
        await _Peeked.open(_Blanks(2_000_000), False, 1_000_000)

    class Then(_Blanks):
        async def aiter_bytes(self) -> AsyncIterator[bytes]:
            async for block in super().aiter_bytes():
                yield block
            yield b'{"choices": []}'

    peeked, streamed = await _Peeked.open(Then(200_000), False, 1_000_000)
    assert not streamed and (await peeked.read(1_000_000)).strip() == b'{"choices": []}'


KEY_ENV = {
    "openai-chat": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


@pytest.mark.parametrize(
    ("provider", "transport"), [(p, t) for p in sorted(SERVERS4) for t in ("http", "sdk")]
)
def test_a_401_or_403_that_echoes_the_key_is_final_and_never_prints_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, provider: str, transport: str
) -> None:
    """A 401 (http) or 403 (sdk) whose body quotes the key back: one request, not retried, the
    run says the status and which variable to check, and the key is in no output or trace; the
    key went where it was meant to."""
    secret = "sk-round7-echoed-back-0123456789"
    monkeypatch.setenv(KEY_ENV[provider], secret)
    status = 401 if transport == "http" else 403
    body = {"error": {"message": f"Incorrect API key provided: {secret}.", "code": "invalid_api_key"}}
    with SERVERS4[provider](scripted([Reply(status=status, error_body=body)] * 2)) as server:
        model = {"provider": provider, "name": "m-1", "base_url": server.url, "transport": transport,
                 "max_retries": 1, "timeout_s": 3}  # fmt: skip
        path = write_agent(tmp_path, model)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        summary = json.loads(out.getvalue().strip().split("\n")[-1])
        assert (code != 0, summary["stop_reason"], len(server.received)) == (True, "model_error", 1), summary
        assert f"HTTP {status}" in summary["message"] and KEY_ENV[provider] in summary["message"], summary
        assert secret in str(server.received[0].headers)
    assert secret not in out.getvalue() + err.getvalue()
    written = [f for f in tmp_path.rglob("*") if f.is_file() and f.suffix != ".yaml"]
    assert written and not any(secret in f.read_text("utf-8", "replace") for f in written)
