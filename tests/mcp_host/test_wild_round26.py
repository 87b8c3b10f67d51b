"""Wild servers, round twenty-six: servers hostile while answering a call, a stdio server written
by hand (``wild26_server.py``) and a Streamable HTTP one (``wild26_web.py``), each beside the
honest stdio server (``wild4_server.py``), and a server on the official SDK (``wild26_sdk_server.py``)
over HTTP, checked to serve.

Contained already (checked here): on stdio, an answer with another id, a second answer, a result
then an error for one id, 5,000 progress and log notifications, ``notifications/cancelled`` for
the host's call, ``tools/list_changed`` with every call (one re-list each), 50 MB of text, a
structured result nested 5,000 levels, an answer cut inside a UTF-8 sequence, ``structuredContent``
saying otherwise than the text (the model reads the text), a link to ``file:///etc/passwd`` (named,
not fetched); over HTTP, an event stream kept open after its answer and an event cut inside a UTF-8
sequence.

Found:

* an event stream answering a call with the answer to another request (its id another's) had the
  call take it as its own: the SDK gives any answer on a POST's stream the id POSTed. A JSON body
  so answered already failed; such an event is now an error for the call, named a forged answer;
* an answer event past the host's limit (50 MB) failed the call as an answer that never came
  ("ended its answer without the answer … whether it took effect is unknown", after a ping): the
  SDK's own cap ended the stream as one without a response. It is now the error stdio gives, the
  answer larger than the host accepts, and the rest of it is not read.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import StopReason
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import _serve, approve, honest_server, script, write_config
from .wild26_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
FORGED = "the server answered this request with the id of another request (a forged answer)"
TOO_LARGE = "the server's answer was larger than the host accepts (8388608 bytes)"


def _value(said: str, key: str, suffix: str = "") -> bool:
    """Whether ``said`` is the call's own answer, labelled as the server's."""
    return (
        said.startswith('<untrusted_data source="x"')
        and f"\nvalue-of-{key}{suffix}\n</untrusted_data>" in said
    )


def _failed(said: str, why: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and 'error="upstream_error"' in said and why in said


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str]) -> Any:
    """The run calling ``x__lookup`` with each key, then ``ok``; ``ok`` served, the run done."""
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(50):  # (the calls' own timeouts are 60 s)
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"))
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    assert len(run.seen("x__lookup")) == len(keys) and not run.summary().get("unavailable_servers")
    return run


@contextmanager
def _web() -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild26_web.py`` on 127.0.0.1: its config entry, and what it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app("s26", seen, stop)) as base:
            yield (
                {
                    "name": "x",
                    "url": f"{base}/mcp",
                    "mode": "legacy",
                    "effects": {"lookup": "read"},
                    "timeout_s": 60,
                },
                seen,
            )
            stop.set()
    finally:
        stop.set()


def _stdio() -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild26_server.py")],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }


async def test_a_stdio_server_answering_twice_or_falsely_is_contained(tmp_path: Path) -> None:
    """Another id first, two answers, a result then an error, a flood of notifications, the
    call cancelled by the server, a re-list notice: each call gets its own answer, labelled, and
    the server serves the next call."""
    keys = ["otherid", "twice", "thenerror", "flood", "cancel", "relist", "after"]
    said = (await _run(tmp_path, _stdio(), keys)).seen("x__lookup")
    assert [_value(s, k) for s, k in zip(said, keys, strict=True)] == [True] * len(keys)
    assert "forged" not in said[0] and "second" not in said[1] and "IGNORE" not in said[3]


async def test_a_stdio_server_answering_oddly_is_contained(tmp_path: Path) -> None:
    """An answer cut inside UTF-8, a structured result saying otherwise, a link to
    ``/etc/passwd``, 50 MB, 5,000 levels: the answer, or a typed error, and the next call served."""
    said = (await _run(tmp_path, _stdio(), ["split", "contradict", "passwd", "big", "deep", "after"])).seen(
        "x__lookup"
    )
    assert _value(said[0], "split", "-é€😀") and _value(said[1], "contradict") and "SOMETHING" not in said[1]
    assert "[resource_link not fetched: file:///etc/passwd (passwd)]" in said[2] and "root:" not in said[2]
    assert _failed(said[3], TOO_LARGE) and _failed(said[4], "not valid JSON-RPC")
    assert _value(said[5], "after")


async def test_an_event_stream_answering_another_request_fails_the_call(tmp_path: Path) -> None:
    """The call's stream carries the answer to request 9999: a typed error naming the forged
    answer (before: taken as the call's own, ``value-of-foreign``); the calls answered on a stream
    kept open after the answer, and cut inside a UTF-8 sequence, are served."""
    with _web() as (entry, _):
        run = await _run(tmp_path, entry, ["foreign", "endless", "split", "after"])
    said = run.seen("x__lookup")
    assert _failed(said[0], FORGED) and "value-of-foreign" not in said[0]
    assert [_value(s, k, "-é€😀") for s, k in zip(said[1:], ["endless", "split", "after"], strict=True)] == [
        True
    ] * 3


async def test_an_answer_event_past_the_limit_is_named_too_large(tmp_path: Path) -> None:
    """A 50 MB answer event: the error stdio gives, at once, with no ping of the session (before:
    "ended its answer … without the answer", after a ping); a flood of log notifications, a second
    answer and ``notifications/cancelled`` on the call's stream leave the calls served."""
    with _web() as (entry, seen):
        run = await _run(tmp_path, entry, ["big", "flood", "twice", "cancel", "after"])
    said = run.seen("x__lookup")
    assert _failed(said[0], TOO_LARGE) and "without the answer" not in said[0]
    assert not [m for m in seen if m.startswith("ping")]
    assert [
        _value(s, k, "-é€😀") for s, k in zip(said[1:], ["flood", "twice", "cancel", "after"], strict=True)
    ] == [True] * 4


def _sdk_app() -> Any:
    spec = importlib.util.spec_from_file_location("wild26_sdk_server", HERE / "wild26_sdk_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mcp.streamable_http_app()


async def test_an_sdk_server_answering_on_event_streams_serves(tmp_path: Path) -> None:
    """The official SDK answers each call on its event stream after progress notifications:
    each call served, its own answer (the checks on a call's stream pass a legitimate one)."""
    for url in _serve(_sdk_app()):
        entry = {"name": "x", "url": url, "mode": "legacy", "effects": {"lookup": "read"}, "timeout_s": 60}
        run = await _run(tmp_path, entry, ["a", "b", "c"])
        said = run.seen("x__lookup")
        assert [_value(s, k, "-é€😀") for s, k in zip(said, "abc", strict=True)] == [True] * 3
