"""Wild servers, round thirty-two: hostile and quirky servers launched the ordinary way, a stdio
server written by hand (``wild32_server.py``) beside the honest stdio server (``wild4_server.py``),
and a Streamable HTTP one (``wild32_web.py``).

Found:

* text that is not well-formed Unicode failed what carried it as "not valid JSON-RPC": half a
  surrogate pair written as a JSON escape (``"\\ud83d"``: a JavaScript server cutting a text
  between the halves of an emoji with ``slice``, which ``JSON.stringify`` writes so and the
  TypeScript SDK reads), or bytes that are not UTF-8. In a result the call failed; in a listing
  the server could not start (over HTTP) or its start failed. Such text is now read as U+FFFD
  (``mcp/_framing.well_formed``), on stdio lines, HTTP JSON bodies and event streams (an event
  whose JSON spans several ``data:`` lines too: its rewritten data kept one line only).

Held (pinned): terminal escape sequences and control characters a server writes anywhere (its
name, version, instructions, log notifications, stderr, results, errors, the stderr it leaves
when it dies) never reach the terminal of ``tether mcp review`` or ``tether mcp run`` raw; an
answer repeated, answers under ids that are no request's (``true``, an object, one never sent)
and an empty batch are dropped, each call getting its own; a server that never answers a call
and ignores ``SIGTERM`` ends its run at the run's deadline, and no process of it is left.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.cli import main
from tether.core.stop import Limits, StopReason
from tether.mcp._clean import clean_result_data, clean_result_text
from tether.mcp._framing import well_formed
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, processes_mentioning, script, web_server, write_config
from .wild32_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
SERVER = HERE / "wild32_server.py"
REPLACED = "\ufffd"
# What a terminal acts on: C0 controls but tab and newline, DEL, C1 controls, bidi overrides.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _entry(mode: str = "", *more: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(SERVER), mode, *more],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


def _value(said: str, key: str, tail: str = "") -> bool:
    return (
        said.startswith('<untrusted_data source="x"') and f"\nvalue-of-{key}{tail}\n</untrusted_data>" in said
    )


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str], **limits: Any) -> Any:
    """The run calling ``x__lookup`` with each key, then ``ok__lookup`` (served)."""
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(50):
        return await run_question(
            config,
            "Q",
            script(*steps, ("ok__lookup", {"key": "z"}), "done"),
            limits=Limits(max_steps=30, **limits),
        )


# -- found: text that is not well-formed Unicode ----------------------------------------------------


def test_only_what_is_not_well_formed_unicode_is_replaced() -> None:
    """Half a surrogate pair (high or low, alone, in any case) is U+FFFD; a whole pair, an
    escaped backslash before ``ud83d`` and well-formed UTF-8 are kept as sent (the same
    object: nothing copied); bytes that are not UTF-8 are U+FFFD each."""
    kept = [
        rb'{"t": "a\ud83d\ude00"}',
        rb'{"t": "a\uD83D\uDE00"}',
        rb'{"t": "a\\ud83d"}',
        '{"t": "caf\u00e9 \U0001f600"}'.encode(),
        rb'{"t": "\u00e9\ufffd"}',
    ]
    for raw in kept:
        assert well_formed(raw) is raw
    assert well_formed(rb'{"t": "a\ud83d"}') == rb'{"t": "a\ufffd"}'
    assert (
        well_formed(rb'{"t": "\ude00\uD83Dx\ud83d\ud83d\ude00"}')
        == rb'{"t": "\ufffd\ufffdx\ufffd\ud83d\ude00"}'
    )
    assert well_formed(rb'{"t": "a\\\ud83d"}') == rb'{"t": "a\\\ufffd"}'
    assert well_formed(b'{"t": "a\xff\xc3"}') == '{"t": "a\ufffd\ufffd"}'.encode()


async def test_half_an_emoji_and_bytes_not_utf8_are_read_over_stdio(tmp_path: Path) -> None:
    """``torn`` describes its tool with half an emoji: it starts and is approved; a text ending
    in half an emoji or in bytes that are not UTF-8 is read with U+FFFD in their place (before:
    each call failed "not valid JSON-RPC"), and the run goes on."""
    run = await _run(tmp_path, _entry("torn"), ["torn", "bytes", "a"])
    said = run.seen("x__lookup")
    assert _value(said[0], "torn", REPLACED) and _value(said[1], "bytes", REPLACED * 4)
    assert _value(said[2], "a") and run.result.stop_reason is StopReason.ACCEPTED
    assert not run.summary()["unavailable_servers"]


async def test_half_an_emoji_and_bytes_not_utf8_are_read_over_http(tmp_path: Path) -> None:
    """The HTTP server lists its tool with half an emoji (before: it could not be started) and
    answers in JSON bodies and event streams (an event written over several ``data:`` lines
    too): each text is read with U+FFFD for what is not well-formed."""
    keys = ["torn", "sse-torn", "sse-torn-lines", "bytes", "sse-bytes", "a"]
    with serving(app(seen := [])) as url:
        server = web_server("x", f"{url}/mcp", effects={"lookup": "read"}, timeout_s=30)
        config = write_config(tmp_path, [server])
        await approve(config, "x")
        with anyio.fail_after(50):
            run = await run_question(config, "Q", script(*[("x__lookup", {"key": k}) for k in keys], "done"))
    said = run.seen("x__lookup")
    tails = [REPLACED, REPLACED, REPLACED, REPLACED * 4, REPLACED * 4, ""]
    assert [_value(s, k, t) for s, k, t in zip(said, keys, tails, strict=True)] == [True] * len(keys)
    assert seen.count("tools/call") == len(keys) and run.result.stop_reason is StopReason.ACCEPTED


# -- found: a wide structured result walked string by string ---------------------------------------


def _walked(value: Any) -> Any:
    """Each string of ``value`` (keys included) cleaned one by one, as every value once was."""
    if isinstance(value, str):
        return clean_result_text(value)[0]
    if isinstance(value, dict):
        return {_walked(k): _walked(v) for k, v in value.items()}
    return [_walked(v) for v in value] if isinstance(value, list) else value


WIDE = {f"{i:x}": [i, "caf\u00e9 \U0001f600", None, 1.5, True] for i in range(20_000)}
TOUCHED = [
    {"a": "x\u200by"},
    {"a\u202e": 1},
    ["see [docs](https://evil.example/x)"],
    {"a": "![i][r]"},
    {"a": "[r]: https://evil.example"},
    {"a": "<!-- hi -->"},
    {"a": "<img src=x>"},
    {"a": "line\r\nbreak"},
    {"a": "\x7f"},
    {"k": {"deep": ["\u2028"]}},
]


def test_a_wide_result_no_string_of_which_changes_is_taken_at_once() -> None:
    """A structured result none of whose strings cleaning would change (brackets, non-ASCII
    text and numbers included) is the same object, not walked string by string (800,000 keys
    had held the event loop for tens of seconds); one any string of which changes is cleaned
    exactly as each string alone is, and values JSON cannot write are walked as before."""
    plain = [WIDE, {"a": "[1]", "b": ["]", "[x] (y)"], "c": {"d": "a] :b"}}, [], {}, "text", 3]
    for value in plain:
        assert clean_result_data(value) == (value, {}) and clean_result_data(value)[0] is value
    for value in [*TOUCHED, {"a": {1, 2}}, {"a": b"x"}]:
        assert clean_result_data(value)[0] == _walked(value)
    assert all(clean_result_data(v)[0] != v for v in TOUCHED)


# -- held ------------------------------------------------------------------------------------------


async def test_repeated_and_stray_answers_are_dropped(tmp_path: Path) -> None:
    """An answer sent twice, answers under ids that are no request's and an empty batch: each
    call gets its own answer, and the run goes on."""
    run = await _run(tmp_path, _entry(), ["twice", "stray", "a"])
    said = run.seen("x__lookup")
    assert [_value(s, k) for s, k in zip(said, ["twice", "stray", "a"], strict=True)] == [True] * 3
    assert not any("forged" in s for s in said) and not run.summary()["unavailable_servers"]


def test_escape_sequences_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``esc`` writes terminal escape sequences everywhere it writes: ``tether mcp review``,
    ``approve`` and ``run`` (a result, an error, the stderr a dying server leaves) show them
    escaped, never raw, and still say what happened."""
    write_config(tmp_path, [_entry("esc")])
    config = str(tmp_path / "mcp.yaml")
    assert main(["mcp", "review", "x", "--config", config]) == 0
    assert main(["mcp", "approve", "x", "--config", config]) == 0
    steps = tmp_path / "steps.json"
    calls = [{"call": "x__lookup", "arguments": {"key": k}} for k in ("esc", "err", "die")]
    steps.write_text(__import__("json").dumps([*calls, {"final": "ok"}]))
    main(["mcp", "run", "Q", "--config", config, "--script", str(steps), "--db", str(tmp_path / "a.db")])
    shown = capsys.readouterr()
    for out in (shown.out, shown.err):
        assert not RAW_CONTROL.search(out), RAW_CONTROL.findall(out)[:5]
    assert "<U+001B>]0;owned<U+0007>" in shown.err and "exited with code 3" in shown.out
    assert "pinned   x__lookup" in shown.out and "call x__lookup: ok" in shown.out


async def test_a_server_ignoring_sigterm_and_never_answering_ends_at_the_deadline(tmp_path: Path) -> None:
    """``hang`` never answers a call and ignores ``SIGTERM``: the run stops at its deadline
    (the call's own timeout is 60 s), and no process of the server is left."""
    marker = str(tmp_path / "hang-marker")
    config = write_config(tmp_path, [_entry("hang", marker)])
    await approve(config, "x")
    with anyio.fail_after(40):
        run = await run_question(
            config, "Q", script(("x__lookup", {"key": "a"}), "done"), limits=Limits(deadline_s=3)
        )
    assert run.result.stop_reason is StopReason.DEADLINE
    with anyio.fail_after(20):
        while processes_mentioning(marker):
            await anyio.sleep(0.1)
