"""Wild servers, round nine. A Streamable HTTP server (round six's, by hand) that compresses its
answers (``Content-Encoding``): honestly, as a gzip bomb, around a forged answer, or in an
encoding the host never asked for. A stdio server by hand (``wild9_server.py``) whose pinned
schemas cost unbounded work to check: references that multiply, ``uniqueItems`` over 50 000
objects, a pattern ``re`` backtracks on exponentially (in an input and an output schema), and
a listing of pages that together hold far more than any one message. Each runs next to an
honest stdio server (``wild4_server.py``), and both are checked: the hostile answers are
contained (the host never froze, nor held what it does not take), named, and the honest ones
serve."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core._schema import SchemaViolation, UnusableSchema, validate
from tether.core.stop import StopReason
from tether.mcp._httpcap import ACCEPTED_ENCODINGS
from tether.mcp._source import MAX_LISTING_CHARS
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .test_wild_round6 import _wild_http

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

BOMB_MIB = 64  # what the bomb decodes to (the host takes 8 MiB): about 64 KiB on the wire


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``lookup`` of the honest server ``ok`` (saves a launch a test)."""
    import anyio

    folder = tmp_path_factory.mktemp("w9pins")
    anyio.run(approve, write_config(folder, [honest_server(20)]), "ok")
    return folder / "pins.db"


def _bomb(ident: Any) -> bytes:
    """A gzip answer to ``ident`` whose text is ``BOMB_MIB`` MiB of ``B``."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head, tail = json.dumps(
        {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "@"}]}}
    ).split("@")
    block = b"B" * (1 << 20)
    parts = [packer.compress(head.encode())]
    parts += [packer.compress(block) for _ in range(BOMB_MIB)]
    return b"".join([*parts, packer.compress(tail.encode()), packer.flush()])


def _compressing_web(asked: list[str]) -> type[Any]:
    """Round six's server (mode ``plain``), every JSON answer sent gzip-compressed; the call of
    ``bomb`` is answered by ``_bomb``, of ``forged`` by a compressed answer with another id, of
    ``zstd`` by an answer marked ``zstd`` (never asked for). ``asked`` gets each request's
    ``Accept-Encoding``."""
    base_app = _wild_http("plain", [])

    class App(base_app):  # type: ignore[misc,valid-type]  (a class made at run time)
        def _send(self, status: int, body: Any = None, **headers: str) -> None:
            if not isinstance(body, dict):
                return super()._send(status, body, **headers)
            self._raw(status, gzip.compress(json.dumps(body).encode()), "gzip", **headers)

        def _raw(self, status: int, raw: bytes, coding: str, **headers: str) -> None:
            self.send_response(status)
            more = {"Content-Type": "application/json", "Content-Encoding": coding, **headers}
            for key, value in {**more, "Content-Length": str(len(raw))}.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

        def do_POST(self) -> None:
            asked.append(self.headers.get("Accept-Encoding", ""))
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            message = json.loads(raw)
            ident = message.get("id")
            key = ((message.get("params") or {}).get("arguments") or {}).get("key")
            if key == "bomb":
                return self._raw(200, _bomb(ident), "gzip")
            if key == "forged":
                answer = {"jsonrpc": "2.0", "id": ident + 1000, "result": {"content": []}}
                return self._raw(200, gzip.compress(json.dumps(answer).encode()), "gzip")
            if key == "zstd":
                answer = {"jsonrpc": "2.0", "id": ident, "result": {"content": []}}
                return self._raw(200, json.dumps(answer).encode(), "zstd")
            connection, self.rfile = self.rfile, io.BytesIO(raw)  # the body again, for round six's
            try:
                super().do_POST()
            finally:
                self.rfile = connection

    return App


@contextlib.contextmanager
def _compressing(asked: list[str]) -> Iterator[dict[str, Any]]:
    with serving(_compressing_web(asked)) as base:
        yield {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}


async def test_compressed_answers_are_decoded_within_the_hosts_limit_and_checked_as_plain_ones(
    tmp_path: Path, pins: Path
) -> None:
    """httpx decoded a compressed body after the host's transport had capped and checked it: a
    gzip bomb of 64 KiB reached the SDK as 64 MiB (read whole, the call served it cut), and a
    compressed answer bearing another request's id passed the forged-answer check (the call
    waited out its timeout). Now the transport decodes in bounded pieces, asks only for what it
    decodes, and checks the decoded answer: the bomb fails its call at the limit, the forgery
    and an encoding never asked for fail theirs at once; compressed honest answers serve, as
    does the honest server."""
    asked: list[str] = []
    with _compressing(asked) as web:
        config = write_config(tmp_path, [{**web, "timeout_s": 20}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        keys = ["a", "bomb", "forged", "zstd", "b"]
        steps = script(*[("web__lookup", {"key": k}) for k in keys], ("ok__lookup", {"key": "d"}), "done")
        run = await run_question(config, "Q", steps)
    a, bomb, forged, zstd, b = run.seen("web__lookup")
    assert "value-of-a" in a and "value-of-b" in b  # compressed, decoded
    assert "larger than the host accepts" in bomb and "BBBB" not in bomb  # before: served, cut
    assert "answered this request with the id of another request" in forged  # before: timed out
    assert "encoded as zstd, which the host did not ask for" in zstd
    assert set(asked) == {ACCEPTED_ENCODINGS}  # before: gzip, deflate, zstd
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


def w9(name: str, **extra: Any) -> dict[str, Any]:
    """``wild9_server.py``, unconfined (launched faster), every tool a read."""
    tools = ("lookup", "spread", "report", "tags", "stats", "label")
    return {
        "name": name,
        "command": [sys.executable, str(Path(__file__).with_name("wild9_server.py"))],
        "mode": "legacy",
        "effects": dict.fromkeys(tools, "read"),
        "timeout_s": 20,
        "sandbox": "none",
        **extra,
    }


async def test_schemas_that_cost_unbounded_work_to_check_are_refused_and_ordinary_ones_still_checked(
    tmp_path: Path, pins: Path
) -> None:
    """A pinned tool's input schema whose references multiply (2 ** 30 checks of one string), an
    output schema the same, and 50 000 distinct objects under ``uniqueItems``: each froze the
    whole host (the run's deadline, every other server) for hours, in the host's engine or in
    the SDK's own check of structured results. Now the host's engine alone checks results, its
    references counted and uniqueness found in linear time: the first two calls are refused,
    named, the third served; an ordinary output schema is still enforced, and the honest server
    serves."""
    config = write_config(tmp_path, [w9("x"), honest_server(20)], pins_from=pins)
    await approve(config, "x")
    calls = [
        ("spread", "a"),
        ("report", "b"),
        ("tags", "c"),
        ("stats", "d"),
        ("stats", "bad"),
        ("lookup", "e"),
    ]
    steps = script(
        *[(f"x__{tool}", {"key": key}) for tool, key in calls], ("ok__lookup", {"key": "f"}), "done"
    )
    run = await run_question(config, "Q", steps)
    (spread,) = run.seen("x__spread")  # refused before it is sent: no observation of the server's
    assert "steps of work" in spread and "value-of-a" not in spread
    report, tags, good, bad, lookup, ok = run.result.observations
    assert report.error_kind == "invalid_output" and "value-of-b" not in report.text
    assert "value-of-c" in tags.text and not tags.is_error
    assert "value-of-d" in good.text and bad.error_kind == "invalid_output"
    assert "value-of-e" in lookup.text and "value-of-f" in ok.text
    assert run.result.stop_reason is StopReason.ACCEPTED


def test_the_engines_bounds_keep_honest_recursion_and_uniqueness_as_they_were() -> None:
    """The reference budget grows with the value: a recursive tree schema checks a tree of 3 000
    nodes (a reference per node) as before, while references that multiply are refused on one
    string; ``uniqueItems`` in linear time finds the duplicates jsonschema finds (``1`` and
    ``1.0``, objects in another key order) and keeps ``true`` apart from ``1``."""
    node = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    tree = {"kids": [{"kids": [{"kids": []}] * 3} for _ in range(1000)]}  # 4 001 nodes
    validate({"$ref": "#/$defs/node", "$defs": {"node": node}}, tree)
    from .wild9_server import SPREAD

    with pytest.raises(UnusableSchema, match="steps of work"):
        validate({"$ref": "#/$defs/d0", **SPREAD}, "x")
    unique = {"type": "array", "uniqueItems": True}
    for same in ([1, 1.0], [{"a": 1, "b": [2]}, {"b": [2], "a": 1}], ["x", "y", "x"]):
        with pytest.raises(SchemaViolation):
            validate(unique, same)
    validate(unique, [1, True, 0, False, {"a": [1]}, {"a": [True]}, None, "1"])


async def test_a_listing_whose_pages_come_to_more_than_the_host_holds_fails_that_server_only(
    tmp_path: Path, pins: Path
) -> None:
    """From its second listing on (the re-check before each call), the server adds five pages of
    8 MB each (each under the host's message limit, and 100 pages were allowed): the
    host held all of them, parsed again before every call (800 MiB at 100 pages). Now a listing
    past ``MAX_LISTING_CHARS`` in all is refused as it goes past, as one past
    ``MAX_LISTED_TOOLS`` tools is: that server's calls fail, named, the honest one serves."""
    await approve(write_config(tmp_path, [w9("x")], pins_from=pins), "x")  # (pins: for the command)
    fat = w9("x", env={"W9_FAT_PAGES": "5"}, tools=["lookup"], effects={"lookup": "read"})
    config = write_config(tmp_path, [fat, honest_server(20)])
    steps = script(
        ("x__lookup", {"key": "a"}), ("x__lookup", {"key": "b"}), ("ok__lookup", {"key": "c"}), "done"
    )
    run = await run_question(config, "Q", steps)
    why = f"its tool listing went past {MAX_LISTING_CHARS} characters"
    assert [why in said for said in run.seen("x__lookup")] == [True, True]  # before: both served
    assert "value-of-c" in run.seen("ok__lookup")[0]


async def test_a_pattern_that_backtracks_exponentially_is_matched_in_linear_time_both_ways(
    tmp_path: Path, pins: Path
) -> None:
    """``^(\\w+\\s?)*$`` in a pinned tool's input and output schemas: 40 letters and a ``!``
    took ``re`` hours to refuse (each letter a place to split the word), and nothing interrupts
    ``re``: an argument the model was led to send, or a result the server chose, froze the whole
    host. Now such a pattern is matched by a linear simulation: the argument is refused, the
    result is ``invalid_output``, both named; matching ones are served, as is the honest
    server."""
    config = write_config(tmp_path, [w9("x"), honest_server(20)], pins_from=pins)
    await approve(config, "x")
    near = "b" * 40 + "!"
    calls = [("label", "some words"), ("label", near), ("label", "a" * 40), ("lookup", "e")]
    steps = script(
        *[(f"x__{tool}", {"key": key}) for tool, key in calls], ("ok__lookup", {"key": "f"}), "done"
    )
    run = await run_question(config, "Q", steps)
    words, argument, result = run.seen("x__label")
    assert "some words" in words and "invalid_output" not in words
    assert "does not match" in argument and "reject" in argument  # before: hours in the intake
    assert "invalid_output" in result and f"{'a' * 40}!" not in result  # before: hours
    assert "value-of-e" in run.seen("x__lookup")[0] and "value-of-f" in run.seen("ok__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.parametrize(
    "pattern",
    [
        r"^(a+)+$",
        r"^([a-z]+(-[a-z]+)*)$",
        r"(ab|a)*c",
        r"^(\d{1,3}\.){3}\d{1,3}$",
        r"(x|xy){2,4}z",
        r"^(?:[a-c]{,2}d)+$",
        r"(a?){3,}b",
        r"(.*,)*x",
        r"(\n|a)*$",
        r"(?P<n>a|b)+\.{2}",
        r"([\w.-]+@)+x",
        r"(|a)+b",
        r"^(?!admin)[a-z]+$",
        r"\bfoo\b",
        r"(a)\1",
        r"^(?=.*[A-Z])(?=.*\d).{3,}$",
    ],
)
def test_schema_patterns_match_what_re_matches(pattern: str) -> None:
    """Every string of up to three characters over a small alphabet, and a spread of longer
    ones: the host's bounded matcher and ``re`` agree (lookarounds and backreferences
    included)."""
    import itertools
    import re

    from tether.core._pattern import pattern_search

    alphabet = "ab1-.@,\nxyzcdAf"
    texts = ["".join(c) for size in range(4) for c in itertools.product(alphabet, repeat=size)]
    texts += ["foo bar", "a foo b", "xaa", "admin", "user", "Ab1", "10.0.0.1", "ab-cd-ef", "x,y,x"]
    for text in texts:
        assert pattern_search(pattern, text) == (re.search(pattern, text) is not None), text


def test_a_pattern_that_still_backtracks_past_the_budget_is_unusable_and_the_next_check_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``^(a|aa)+$`` on forty ``a`` and a ``!`` backtracks even in ``regex`` (the count of ways
    to split the run grows as Fibonacci's): matching stops at the check's time budget and the
    value is refused, named, instead of freezing the host; the budget is the check's, so the
    next check of the same schema starts afresh and a matching value passes."""
    from tether.core import _pattern

    monkeypatch.setattr(_pattern, "PATTERN_SECONDS", 0.05)
    schema = {"type": "object", "properties": {"key": {"type": "string", "pattern": r"^(a|aa)+$"}}}
    with pytest.raises(UnusableSchema, match="took more than"):
        validate(schema, {"key": "a" * 40 + "!"})
    validate(schema, {"key": "a" * 40})
    with pytest.raises(SchemaViolation):
        validate(schema, {"key": "b"})
    with pytest.raises(UnusableSchema, match="not a regular expression"):
        _pattern.pattern_search("(a", "a")


async def test_a_compressed_event_stream_is_decoded_before_a_listing_too_deep_is_cut(
    tmp_path: Path, pins: Path
) -> None:
    """Round six's server listing a tool nested deeper than the SDK reads, as an event stream,
    gzip-compressed: the host cut deep tools from the compressed bytes (finding nothing to cut),
    and the SDK refused the whole listing, so the server could not start. Now the stream is
    decoded first: ``deep`` alone is left out, named, and ``lookup`` serves."""
    base_app = _wild_http("deep_events", [])

    class App(base_app):  # type: ignore[misc,valid-type]  (a class made at run time)
        def _send(self, status: int, body: Any = None, **headers: str) -> None:
            if not isinstance(body, bytes):
                return super()._send(status, body, **headers)
            raw = gzip.compress(body)
            self.send_response(status)
            kind = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
            for key, value in {**kind, "Content-Length": str(len(raw)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

    with serving(App) as base:
        web = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
        config = write_config(tmp_path, [{**web, "timeout_s": 20}, honest_server(20)], pins_from=pins)
        pinned, skipped = await approve(config, "web")  # before: the server could not be started
        assert pinned == ["lookup"] and "nests more than" in skipped["deep"]
        steps = script(("web__lookup", {"key": "a"}), ("ok__lookup", {"key": "b"}), "done")
        run = await run_question(config, "Q", steps)
    assert "value-of-a" in run.seen("web__lookup")[0] and "value-of-b" in run.seen("ok__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED
