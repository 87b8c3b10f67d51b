"""Wild servers, round sixteen: a stdio server written by hand (``wild16_server.py``) and a
Streamable HTTP one (``wild16_web.py``), each next to a well-behaved server that is checked to
serve: the official SDK's quickstart server (``wild16_sdk_server.py``, launched as a user
configures it) or the honest stdio server (``wild4_server.py``).

Found: an answer of hundreds of thousands of small objects (200 000 text blocks of one letter,
6 MB, under the host's message limit) was handed to the SDK, which made a model of each on the
host's event loop: seconds of CPU and 400 MB for one answer, every other server and the console
waiting (a million blocks, under the limit of a server allowed long results: 15 s and 2 GB). Now a
message of more than ``MAX_CONTAINERS`` objects and arrays is refused before the SDK reads it, over
stdio, in an HTTP JSON body and in an event, and the call it answers fails at once, named.

Already contained, kept as checks: images and audio of bad base64 or a lying MIME type, embedded
resources, a resource link of control characters, answers with both a result and an error, a
tool named twice in one listing with two schemas, requests to the host before the server's
``initialize`` answer or inside its listing, schemas of ``$ref`` cycles and of ``oneOf``,
``anyOf``, ``allOf`` and ``not`` mixed; over HTTP, an answer labelled ``text/plain``, an event
stream labelled JSON, an answer's stream left open, a session close (``DELETE``) never
answered."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.mcp._bulk import MAX_CONTAINERS, counted, refusal
from tether.mcp._deep import cut_events
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild16_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2", "X3")]

HERE = Path(__file__).parent
SERVER = HERE / "wild16_server.py"
TOO_MANY = f"more than {MAX_CONTAINERS} JSON objects and arrays"


def w16(name: str = "x", **extra: Any) -> dict[str, Any]:
    """``wild16_server.py``, unconfined (launched faster), every tool of it a read."""
    effects = {t: "read" for t in ("lookup", "cycle", "selfref", "mixed")}
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "mode": "legacy",
        "effects": effects,
        "timeout_s": 120,
        "sandbox": "none",
        **extra,
    }


def _sdk() -> dict[str, Any]:
    """The SDK's quickstart server as a user declares it (``command`` + ``args``, sandbox default)."""
    return {"name": "sdk", "command": sys.executable, "args": [str(HERE / "wild16_sdk_server.py")]}


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``wild16_server.py``'s ``lookup`` as ``x`` and the honest server as ``ok``."""
    import anyio

    folder = tmp_path_factory.mktemp("w16pins")
    config = write_config(folder, [w16(), honest_server()])

    async def go() -> None:
        await approve(config, "x")
        await approve(config, "ok")

    anyio.run(go)
    return folder / "pins.db"


def _served(run: Any, server: str = "ok", key: str = "c") -> bool:
    seen = run.seen(f"{server}__lookup")
    return bool(seen) and f"value-of-{key}" in seen[-1] and run.result.stop_reason is StopReason.ACCEPTED


async def test_an_answer_of_too_many_objects_fails_named_and_braces_in_text_are_still_read(
    tmp_path: Path, pins: Path
) -> None:
    """200 000 text blocks of one letter in one answer (6 MB, under the 8 MiB limit): the SDK
        made a model of each on the host's event loop (seconds, 400 MB). Now the call fails at once,
        named, and the same server answers the next calls (a notification and a request of its own
    past the bound are dropped); a text of 300 000 braces (a count of
        bytes alone would refuse it) and an answer of a thousand blocks are read whole; the honest
        server serves."""
    config = write_config(tmp_path, [w16(max_result_chars=400_000), honest_server()], pins_from=pins)
    steps = script(
        ("x__lookup", {"key": "blocks"}),
        ("x__lookup", {"key": "braces"}),
        ("x__lookup", {"key": "blocks:1000"}),
        ("x__lookup", {"key": "bulknote"}),
        ("ok__lookup", {"key": "c"}),
        "done",
    )
    run = await run_question(config, "Q", steps)
    many, braces, some, noted = run.seen("x__lookup")
    assert 'error="upstream_error"' in many and TOO_MANY in many  # before: 200 000 lines of "b"
    assert braces.count("{") == 300_000 and "value-of-braces" in braces
    assert some.count("\nb") == 1000 and "value-of-blocks:1000" in some
    assert "value-of-bulknote" in noted  # a notification and a request past the bound: dropped
    assert _served(run)


@contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild16_web.py`` in ``mode`` on 127.0.0.1: its config entry, and the methods it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app(mode, seen, stop)) as base:
            entry = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
            yield {**entry, "timeout_s": 60}, seen
            stop.set()  # open streams end before the server shuts down
    finally:
        stop.set()


@pytest.mark.parametrize("mode", ["blocks", "blocks_sse"])
async def test_an_http_answer_of_too_many_objects_fails_named_as_a_body_or_an_event(
    tmp_path: Path, pins: Path, mode: str
) -> None:
    """The same answer over Streamable HTTP, as a JSON body or as an event of the call's stream:
    the call fails at once, named, the session keeps serving (``c``) and so does the other
    server."""
    with _web(mode) as (entry, _):
        config = write_config(tmp_path, [entry, honest_server()], pins_from=pins)
        await approve(config, "web")
        steps = [("web__lookup", {"key": k}) for k in "abc"]
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "d"}), "done"))
    first, many, third = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-c" in third
    assert 'error="upstream_error"' in many and TOO_MANY in many  # before: 200 000 lines of "b"
    assert _served(run, key="d")


async def test_events_of_too_many_objects_are_refused_and_the_others_pass_whole() -> None:
    """Events of a stream as the SDK is given them: an answer past the bound becomes an error for
    its request (its event id kept, for resuming), a notification past it a comment (nothing
    passed on); an event of text full of braces and an ordinary one pass whole."""
    blocks = ",".join(['{"type":"text","text":"b"}'] * (MAX_CONTAINERS + 1))
    answer = f'id: e7\nevent: message\ndata: {{"jsonrpc":"2.0","id":4,"result":{{"content":[{blocks}]}}}}\n\n'
    note = f'data: {{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":[{blocks}]}}}}\n\n'
    braces = 'data: {"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"' + "{" * 200_000
    braces += '"}]}}\n\n'
    ordinary = 'event: message\ndata: {"jsonrpc":"2.0","id":6,"result":{}}\n\n'

    async def chunks() -> Any:
        for event in (answer, note, braces, ordinary):
            yield event.encode()

    out = [chunk async for chunk in cut_events(chunks(), 64 << 20)]
    refused = f'"error": {{"code": -32603, "message": "the server\'s message holds {TOO_MANY}'
    assert out[0].startswith(b"id: e7\nevent: message\ndata: ") and refused.encode() in out[0]
    assert b'"id": 4' in out[0] and len(out[0]) < 1000
    assert out[1].startswith(b": ") and b"data:" not in out[1]
    assert out[2:] == [braces.encode(), ordinary.encode()]


def test_the_bound_counts_objects_and_arrays_not_bytes_and_names_only_answers() -> None:
    """``counted`` parses only past the byte count and counts containers (a string of brackets is
    one value); ``refusal`` answers an answer's id only, never a request's."""
    assert counted(b'{"a": "' + b"[{" * 100_000 + b'"}') is None
    assert counted(b"[" + b"[]," * MAX_CONTAINERS + b"[]]") is not None
    assert counted(b"[" + b"[]," * (MAX_CONTAINERS - 2) + b"[]]") is None
    why = "too many"
    assert refusal({"jsonrpc": "2.0", "id": 3, "result": {}}, why) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32603, "message": why},
    }
    assert refusal({"jsonrpc": "2.0", "id": 3, "method": "ping"}, why) is None
    assert refusal({"jsonrpc": "2.0", "id": True, "result": {}}, why) is None
    assert refusal([{"id": 3}], why) is None


async def test_odd_content_and_requests_at_odd_times_are_contained_and_the_sdk_server_serves(
    tmp_path: Path,
) -> None:
    """Already contained, kept: requests to the host (roots, sampling, a question) and lines of
    noise before the ``initialize`` answer and inside each listing; images and audio of bad
    base64 or a lying MIME type (named only); embedded resources (text shown, a blob of bad base64
    named); a resource link of control characters (shown escaped, flagged); a result with an
    error beside it (the error wins); schemas of ``$ref`` cycles, checked as unusable for every
    value, and of ``oneOf``/``anyOf``/``allOf``/``not`` mixes, checked as written. The SDK's
    quickstart server, declared as users declare it, is approved and serves next to it."""
    asks = "noise,roots,sample,elicit"
    wild = w16(env={"W16_AT_START": asks, "W16_IN_LISTING": asks, "W16_TOOLS": "cycle,mixed"})
    config = write_config(tmp_path, [wild, {**_sdk(), "effects": {"add": "read"}}])
    pinned, skipped = await approve(config, "x")
    assert sorted(pinned) == ["cycle", "lookup", "mixed"] and skipped == {}
    assert (await approve(config, "sdk"))[0] == ["add"]
    steps = script(
        ("x__lookup", {"key": "media"}),
        ("x__lookup", {"key": "embedded"}),
        ("x__lookup", {"key": "both"}),
        ("x__cycle", {"key": "a"}),
        ("x__mixed", {"key": "zzz", "opts": {"n": 3}}),
        ("x__mixed", {"key": "forbidden"}),
        ("sdk__add", {"a": 2, "b": 40}),
        "done",
    )
    run = await run_question(config, "Q", steps)
    media, embedded, both = run.seen("x__lookup")
    assert media.count("content omitted]") == 3 and "aGVsbG8" not in media and "IGNORE" not in media
    assert "T1\n[embedded binary resource omitted: mem://b]" in embedded
    assert "\x1b" not in embedded and "\u202e" not in embedded and "\x00" not in embedded
    assert 'error="upstream_error"' in both and "RESULT" not in both
    assert "too_deep" in run.seen("x__cycle")[0]
    accepted, refused = run.seen("x__mixed")
    assert "value-of-zzz" in accepted and "schema_mismatch" in refused
    assert "42" in run.seen("sdk__add")[0] and run.result.stop_reason is StopReason.ACCEPTED
    rejected = [b for b in run.blocked if b.get("reason") == "hidden_content"]
    assert rejected and rejected[0]["cleaned"]["hidden_chars"] == {"bidi": 1, "control": 2}


@pytest.mark.parametrize("mode", ["ctype", "sse_as_json", "linger", "delete_hang"])
async def test_http_answers_of_the_wrong_kind_or_never_ending_fail_alone(
    tmp_path: Path, pins: Path, mode: str
) -> None:
    """Already contained, kept: an answer labelled ``text/plain`` or an event stream labelled
    JSON fails its call, named; an answer whose stream stays open after it is read at once; a
    session close that is never answered ends the run all the same. The session keeps serving and
    so does the other server."""
    with _web(mode) as (entry, seen):
        config = write_config(tmp_path, [{**entry, "timeout_s": 20}, honest_server()], pins_from=pins)
        await approve(config, "web")
        steps = [("web__lookup", {"key": k}) for k in "abc"]
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "d"}), "done"))
    first, second, third = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-c" in third and _served(run, key="d")
    said = {"ctype": "Unexpected content type: text/plain", "sse_as_json": "Failed to parse JSON response"}
    if mode in said:
        assert 'error="upstream_error"' in second and said[mode] in second
    else:
        assert "value-of-b" in second
    assert seen.count("tools/call") == 3


async def test_a_name_listed_twice_with_two_schemas_is_offered_under_neither(tmp_path: Path) -> None:
    """Already contained, kept: ``lookup`` on the first page of a listing and again, with an
    integer key, on the second: which one a call would be checked against is the server's pick,
    so neither is approved or offered (named); the server's other tool serves."""
    config = write_config(tmp_path, [w16(env={"W16_TWICE": "1", "W16_TOOLS": "mixed"})])
    pinned, skipped = await approve(config, "x")
    assert pinned == ["mixed"] and skipped == {"lookup": "listed more than once"}
    run = await run_question(config, "Q", script(("x__mixed", {"key": "zzz"}), "done"))
    assert run.offered() == ["x__mixed"] and "value-of-zzz" in run.seen("x__mixed")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED


async def test_a_question_whose_field_runs_to_megabytes_is_cut_in_what_the_person_reads(
    tmp_path: Path,
) -> None:
    """A server asks a question (over real stdio) whose one field has a description of 2 MB and
    200 000 choices: the question was cut at 2 000 characters but the field was printed whole,
    4 MB on the person's terminal. Now each field is shown up to ``MAX_FIELD_SHOWN`` characters
    and its size; an answer is still checked against the whole field (a choice past what is
    shown is taken), and a short question is shown whole."""
    from tether.mcp._elicitation import MAX_FIELD_SHOWN, ConsoleResponder

    answers = ['{"colour": "c099999"}', '{"colour": "c000009"}']
    shown: list[str] = []
    person = ConsoleResponder(read=lambda _: answers.pop(0), write=shown.append)
    config = write_config(tmp_path, [w16(elicitation={"enabled": True})])
    await approve(config, "x")
    steps = script(("x__lookup", {"key": "question:4000000"}), ("x__lookup", {"key": "question:200"}), "done")
    run = await run_question(config, "Q", steps, responder=person)
    huge, short = shown
    assert len(huge) < MAX_FIELD_SHOWN + 200  # before: 4 200 081 characters
    assert huge.endswith(" [cut by the host: 4200027 characters in all]")
    assert short.endswith("'c000009'] - " + "d" * 100) and "cut by the host" not in short
    assert ["answered: accept" in seen for seen in run.seen("x__lookup")] == [True, True]
    assert run.result.stop_reason is StopReason.ACCEPTED
