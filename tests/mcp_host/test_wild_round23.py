"""Wild servers, round twenty-three: a stdio server written by hand (``wild23_server.py``), next to
the honest stdio server (``wild4_server.py``), checked to serve.

Found:

* a server pretty-printing with no indent (``json.dumps(m, indent=0)``, Go's
  ``MarshalIndent(v, "", "")``) writes nested brackets at the first column, where round
  twenty-one's framer ended (or cut) the message: it could not even start. Now a message whose
  second line carries no indent is followed bracket by bracket (strings skipped) and ends where its
  first bracket closes; an indented one still ends at its first closing line at the first column;
* after ``notifications/tools/list_changed``, a re-listing the server refused with its own error
  failed the call with the server's words alone (``server x failed: db down``), as if the call had
  run and failed: now it says the call was not sent because the tools could not be checked against
  the pins (``details``: ``cause: relist_failed``, ``sent: false``; still ``upstream_error``: the
  server answers, it is not a source down), and the next call, once it lists again, is served;
* a tool result of ``structuredContent`` alone, with no ``content`` (which the schema requires,
  and the TypeScript SDK's client defaults to ``[]``: servers tried only with it omit it), failed
  the call naming a validation error (``CallToolResult: content: Field required``): now its
  ``content`` is taken as ``[]``, as there, and the structured content is what the model reads.

Contained already (checked here, no change): resource links (named, not fetched), embedded
resources, output that fails the output schema (``invalid_output``), arguments an input schema of
``$ref``/``oneOf``/``additionalProperties: false`` refuses (never sent), progress for tokens of no
request of the call (not shown as the call's), a slow ``initialize``, and a tool whose listing
changed or went, unannounced, between listing and call (refused before it is sent,
``capability_blocked``); the official SDK's pydantic arguments (nested ``$defs``, ``anyOf``,
``extra="forbid"``: a nested extra field refused before the send).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import StopReason
from tether.mcp._framing import Framer
from tether.mcphost._runner import run_question

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
VALUE = "value-of-{}"
EFFECTS = {"lookup": "read", "shaped": "read", "typed": "read"}


def _stdio(*args: str) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild23_server.py"), *args],
        "mode": "legacy",
        "effects": EFFECTS,
        "timeout_s": 60,
        "sandbox": "none",
    }


async def _run(tmp_path: Path, entry: dict[str, Any], steps: list[tuple[str, dict[str, Any]]]) -> Any:
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    with anyio.fail_after(30):  # (the calls' own timeouts are 60 s)
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"))
    assert VALUE.format("z") in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return run


def _lookups(*keys: str) -> list[tuple[str, dict[str, Any]]]:
    return [("x__lookup", {"key": key}) for key in keys]


def _served(said: str, key: str) -> bool:
    return VALUE.format(key) in said and "error=" not in said


async def test_a_server_printing_with_no_indent_starts_and_serves(tmp_path: Path) -> None:
    """Every message of ``flat`` (after a slow ``initialize``) is pretty-printed with no indent,
    nested brackets at the first column, strings holding brackets and newlines: it starts, and
    each call is its own answer (before: its ``initialize`` answer was cut at its first nested
    bracket and it never started)."""
    steps = [*_lookups("a", "b"), ("x__shaped", {"key": "k", "by": 3})]
    run = await _run(tmp_path, _stdio("flat", "slow"), steps)
    said = run.seen("x__lookup")
    assert _served(said[0], "a") and _served(said[1], "b")
    assert "value-of-k by 3 args ['by', 'key']" in run.seen("x__shaped")[0]


def test_a_message_with_no_indent_ends_where_its_first_bracket_closes() -> None:
    """A message whose second line is not indented is read whole at its last bracket, brackets in
    its strings no part of the count; an object opened where a key is wanted, or a bracket closed
    that it did not open, is no part of it: the one begun is cut (refused as any bad line) and the
    next read. An indented one still ends at its first closing line (round twenty-one)."""
    framer = Framer(1 << 20)
    lines = [
        b"{",
        b'"id": 1,',
        b'"result": {',
        b'"tools": [',
        b"{",
        b'"d": "} ] \\" {",',
        b'"s": {}',
        b"}",
        b"]",
    ]
    assert all(framer.lines(line) == [] for line in lines)
    assert framer.lines(b"}") == []
    assert framer.lines(b"}") == [b"\n".join([*lines, b"}", b"}"])]
    answer = b'{"jsonrpc": "2.0", "id": 2, "result": {}}'
    assert framer.lines(b"{") == [] and framer.lines(b'"id": 1,') == []
    assert framer.lines(answer) == [b'{\n"id": 1,', answer]
    assert framer.lines(b"[") == [] and framer.lines(b"{") == [] and framer.lines(b"]") == [b"[\n{", b"]"]
    assert framer.lines(b"{") == [] and framer.lines(b"{") == [b"{"]
    assert framer.lines(b'"id": 3') == [] and framer.lines(b"}") == [b'{\n"id": 3\n}']
    assert framer.rest() == [] and framer.lines(b"{") == [] and framer.lines(b"  [") == []
    assert framer.lines(b"}") == [b"{\n[\n}"]


async def test_a_refused_relisting_fails_the_call_as_not_sent_and_the_next_is_served(tmp_path: Path) -> None:
    """After ``change`` the server says its tools changed, and refuses the next listing (``db
    down``): ``b`` fails saying it was not sent and why, with the server's words, and
    ``details`` ``{"cause": "relist_failed", "sent": false}`` (before: ``server x failed: db
    down`` alone, as if it had run);
    ``c``, listed again, is served."""
    run = await _run(tmp_path, _stdio(), _lookups("a", "change", "b", "c"))
    said = run.seen("x__lookup")
    assert _served(said[0], "a") and _served(said[1], "change") and _served(said[3], "c")
    assert 'error="upstream_error"' in said[2] and VALUE.format("b") not in said[2]
    assert '"details": {"cause": "relist_failed", "sent": false}' in said[2]
    # (why it was listed: the change heard, or, were the notice read after the next call began,
    # the re-check before each call this config makes)
    assert "x__lookup was not sent: it" in said[2] and "listing them again" in said[2]
    assert "(server x failed: db down)" in said[2]


async def test_results_of_other_shapes_are_contained_and_the_server_serves_on(tmp_path: Path) -> None:
    """A resource link is named, not fetched; an embedded resource's text is read; progress for
    tokens of no request of the call is not the call's; structured content alone (no ``content``,
    which the schema requires) is read (before: the call failed naming a validation error);
    structured content the output schema refuses is ``invalid_output``; arguments the input
    schema (``$ref``, ``oneOf``, ``additionalProperties: false``) refuses never reach the server.
    Each server serves on."""
    steps = [
        *_lookups("link", "embedded", "progress", "structured"),
        ("x__typed", {"key": "badout"}),
        ("x__shaped", {"key": "k", "extra": 1}),
        ("x__shaped", {"key": "k", "by": [1]}),
        *_lookups("c"),
    ]
    run = await _run(tmp_path, _stdio(), steps)
    said = run.seen("x__lookup")
    assert _served(said[0], "link") and "[resource_link not fetched: file:///data/k.txt (k.txt)]" in said[0]
    assert _served(said[1], "embedded") and "embedded value-of-embedded" in said[1]
    assert _served(said[2], "progress") and "for 999999" not in said[2]
    assert _served(said[3], "structured") and '"value": "value-of-structured"' in said[3]
    assert _served(said[4], "c")
    assert 'error="invalid_output"' in run.seen("x__typed")[0]
    shaped = run.seen("x__shaped")
    assert "unexpected field 'extra'" in shaped[0] and "value-of-k" not in shaped[1]


async def test_a_tool_changed_between_listing_and_call_is_refused_and_others_serve(tmp_path: Path) -> None:
    """After ``swap`` the server lists ``lookup`` with another description, saying nothing: the
    next call is refused before it is sent (the pins re-checked), and ``typed`` still serves."""
    steps = [*_lookups("swap", "b"), ("x__typed", {"key": "t"})]
    run = await _run(tmp_path, _stdio(), steps)
    said = run.seen("x__lookup")
    assert _served(said[0], "swap") and VALUE.format("b") not in said[1]
    assert 'error="capability_blocked"' in said[1] and "changed: description since approval" in said[1]
    assert _served(run.seen("x__typed")[0], "t")


async def test_a_tool_gone_between_listing_and_call_is_not_sent_and_others_serve(tmp_path: Path) -> None:
    """After ``vanish`` the server no longer lists ``lookup``, saying nothing: the next call fails
    before it is sent, and ``typed`` still serves."""
    steps = [*_lookups("vanish", "b"), ("x__typed", {"key": "t"})]
    run = await _run(tmp_path, _stdio(), steps)
    said = run.seen("x__lookup")
    assert _served(said[0], "vanish") and VALUE.format("b") not in said[1]
    assert 'error="capability_blocked"' in said[1] and "no longer listed by the server" in said[1]
    assert _served(run.seen("x__typed")[0], "t")


async def test_the_sdk_servers_nested_schema_is_honoured_and_extras_never_reach_it(tmp_path: Path) -> None:
    """``find`` (the official SDK, pydantic arguments: ``$defs``/``$ref``, ``anyOf``,
    ``additionalProperties: false`` at each level; structured output): arguments that fit, a
    union's other arm included, are served; an extra field nested in ``$defs`` and a value of
    neither arm are refused by the host before the send; the server serves on."""
    entry = {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild23_sdk_server.py")],
        "mode": "legacy",
        "effects": {"find": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }
    steps: list[tuple[str, dict[str, Any]]] = [
        ("x__find", {"query": {"key": "a", "within": {"low": 1, "high": 2}}}),
        ("x__find", {"query": {"key": "b", "by": 7}}),
        ("x__find", {"query": {"key": "e", "within": {"low": 1, "high": 2, "step": 1}}}),
        ("x__find", {"query": {"key": "u", "by": [1]}}),
        ("x__find", {"query": {"key": "c"}}),
    ]
    said = (await _run(tmp_path, entry, steps)).seen("x__find")
    assert _served(said[0], "a") and '"by": "\'name\'"' in said[0]
    assert _served(said[1], "b") and '"by": "7"' in said[1] and _served(said[4], "c")
    assert "extra_field: unexpected field 'query.within.step'" in said[2] and VALUE.format("e") not in said[2]
    assert "wrong_type: query.by must be string or integer" in said[3] and VALUE.format("u") not in said[3]
