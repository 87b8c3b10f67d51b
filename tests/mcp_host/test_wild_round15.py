"""Wild servers, round fifteen (``wild15_server.py``, written by hand, over real stdio), each next
to an honest stdio server (``wild4_server.py``) that is checked to serve. A tool listing whose
pages name next cursors of megabytes was bounded by its tools alone: the host kept every cursor
(a hundred of 7 MB held 800 MiB) and went on asking. A sampling request of megabytes was sent to
the host's model, billed, before the server's token budget was charged (a million tokens against
a budget of 4 000); now a prompt larger than what is left of the budget is refused before anyone
sees it. A progress notification of numbers JSON has no form for (``1e999``, ``NaN``, which the
SDK's parser takes) was written to the trace bare (``Infinity``, ``NaN``): strict readers refused
the line and PostgreSQL the whole batch of trace rows it came in. A long line on stdout, or a long
event in an HTTP listing's event stream, was joined by copying all of it at each chunk: seconds of
the host's event loop for a few megabytes, growing with the square of the size."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tether.core.messages import AssistantMessage, Usage
from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._config import SamplingConfig
from tether.mcp._deep import cut_events
from tether.mcp._sampling import SamplingGate, SamplingPrompt
from tether.mcphost._runner import run_question
from tether.models._base import ModelRequest, ModelResponse
from tether.models._estimate import estimate_request
from tether.trace._tracer import read_trace

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2", "X3")]

SERVER = Path(__file__).with_name("wild15_server.py")
LISTING_CHARS = 32 * 1024 * 1024  # ``MAX_LISTING_CHARS``


def w15(name: str = "x", **extra: Any) -> dict[str, Any]:
    """``wild15_server.py``, unconfined (launched faster), its tools reads."""
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "mode": "legacy",
        "effects": {"lookup": "read", "stats": "read"},
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``wild15_server.py`` (one page) as ``x`` and the honest server as ``ok``."""
    import anyio

    folder = tmp_path_factory.mktemp("w15pins")
    config = write_config(folder, [w15(), honest_server(20)])

    async def go() -> None:
        await approve(config, "x")
        await approve(config, "ok")

    anyio.run(go)
    return folder / "pins.db"


def _strict(line: str) -> Any:
    """A trace line as a strict JSON reader (jq, PostgreSQL, a browser) reads it."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


async def test_next_cursors_of_megabytes_count_toward_the_listing_bound(tmp_path: Path) -> None:
    """Twenty pages, each naming a new next cursor of 4 MB (80 MB of cursors, one tool on the
    first page and one on the last): the listing was bounded by its tools alone, so the host kept
    every cursor and took every page. Now cursors count toward ``MAX_LISTING_CHARS``: the host
    stops asking past it and the server fails to start, named; the honest server serves. The same
    server with cursors of ordinary size is approved and serves both tools."""
    log = tmp_path / "pages.log"
    fat = w15(env={"W15_PAGES": "20", "W15_CURSOR_BYTES": str(4_000_000), "W15_LOG": str(log)})
    (tmp_path / "fat").mkdir()
    config = write_config(tmp_path / "fat", [fat, honest_server(20)])
    with pytest.raises(DependencyUnavailable, match=f"listing went past {LISTING_CHARS} characters"):
        await approve(config, "x")
    asked = log.read_text(encoding="utf-8").splitlines()
    assert 1 < len(asked) <= LISTING_CHARS // 4_000_000 + 1, asked  # before: all 20 pages
    await approve(config, "ok")
    run = await run_question(config, "Q", script(("ok__lookup", {"key": "b"}), "done"))
    assert "value-of-b" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED

    lean = w15(env={"W15_PAGES": "20", "W15_CURSOR_BYTES": "200"})
    (tmp_path / "lean").mkdir()
    config = write_config(tmp_path / "lean", [lean])
    pinned, skipped = await approve(config, "x")
    assert sorted(pinned) == ["lookup", "stats"] and skipped == {}
    steps = script(("x__lookup", {"key": "a"}), ("x__stats", {"key": "b"}), "done")
    run = await run_question(config, "Q", steps)
    assert "value-of-a" in run.seen("x__lookup")[0] and "value-of-b" in run.seen("x__stats")[0]


class _BilledSampler:
    """A sampling model billed as a provider bills: every token of the prompt it reads."""

    name = "sampler"

    def __init__(self) -> None:
        self.prompts: list[int] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        read = estimate_request(request)
        self.prompts.append(read)
        return ModelResponse(AssistantMessage(content="a summary"), Usage(read, 3), "sampler")


async def test_a_sampling_prompt_larger_than_the_budget_left_is_refused_before_it_is_sent(
    tmp_path: Path, pins: Path
) -> None:
    """A server asks the host's model about 400 000 characters (about 100 000 tokens; its
    budget is 4 000): the prompt was shown, sent and billed, and only then charged, 25 times the
    budget. Now it is refused before the consent hook or the model sees it, named in the trace;
    a short request of the same server is sampled, and the honest server serves."""
    sampling = {"enabled": True, "max_calls": 3, "max_calls_per_call": 1, "max_total_tokens": 4000}
    config = write_config(tmp_path, [w15(sampling=sampling), honest_server(20)], pins_from=pins)
    sampler, shown = _BilledSampler(), []
    steps = script(
        ("x__lookup", {"key": "sample:400000"}),
        ("x__lookup", {"key": "sample:400"}),
        ("ok__lookup", {"key": "c"}),
        "done",
    )
    consent = lambda prompt: shown.append(prompt) or True  # noqa: E731
    run = await run_question(config, "Q", steps, sampling_model=sampler, sampling_consent=consent)
    huge, short = run.seen("x__lookup")
    assert "refused: sampling refused by the host: the prompt is about 100000 tokens" in huge
    assert "sampled: a summary" in short
    assert len(sampler.prompts) == 1 and sampler.prompts[0] < 200  # before: 100 000 tokens read
    assert len(shown) == 1  # the person is never shown the refused prompt
    rows = [e for e in read_trace(run.result.trace_path) if e["kind"] == "mcp_sampling"]
    assert [r["outcome"] for r in rows] == ["refused", "answered"]
    assert "more than the 4000 left of the sampling budget" in rows[0]["reason"]
    assert "value-of-c" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_system_prompt_of_megabytes_is_cut_in_what_the_person_consenting_is_shown() -> None:
    """A server's system prompt is never sent, only shown to the person asked to consent: a
    megabyte of it filled their terminal above the prompt that is sent. Now they are shown its
    first 2 000 characters and its size; a short one is shown whole, and both are sampled."""
    import mcp_types as types

    shown: list[SamplingPrompt] = []
    gate = SamplingGate(
        "s",
        SamplingConfig(enabled=True, max_calls=2, max_calls_per_call=2),
        model=_BilledSampler(),
        consent=lambda prompt: shown.append(prompt) or True,
    )
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
    for system in ("x" * 1_000_000, "Be brief."):
        params = types.CreateMessageRequestParams(messages=[message], max_tokens=20, system_prompt=system)
        assert isinstance(await gate(None, params), types.CreateMessageResult)
    huge, short = (prompt.system_prompt or "" for prompt in shown)
    assert len(huge) < 2100 and huge.endswith("[cut by the host: 1000000 characters in all, never sent]")
    assert short == "Be brief." and shown[0].messages == (("user", "hi"),)


async def test_progress_of_numbers_json_cannot_hold_is_traced_as_strict_json(
    tmp_path: Path, pins: Path
) -> None:
    """Progress of ``1e999`` out of ``NaN`` (each read by the SDK as a float): the trace line held
    them bare (``Infinity``, ``NaN``), which no strict reader takes. Now they are written as their
    names, every trace line is strict JSON, and ordinary progress keeps its numbers."""
    config = write_config(tmp_path, [w15(), honest_server(20)], pins_from=pins)
    steps = script(
        ("x__lookup", {"key": "progress:1e999/NaN"}),
        ("x__lookup", {"key": "progress:-1e999/2.5"}),
        ("x__lookup", {"key": "progress:1/2"}),
        ("ok__lookup", {"key": "c"}),
        "done",
    )
    run = await run_question(config, "Q", steps)
    assert all("value-of-progress" in seen for seen in run.seen("x__lookup"))
    assert run.result.trace_path is not None
    lines = Path(run.result.trace_path).read_text(encoding="utf-8").splitlines()
    events = [_strict(line) for line in lines]  # before: ValueError, not JSON: Infinity
    progress = [(e["progress"], e["total"]) for e in events if e["kind"] == "mcp_progress"]
    assert progress == [("Infinity", "NaN"), ("-Infinity", 2.5), (1, 2)]
    assert "value-of-c" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_long_line_on_stdout_is_read_in_time_linear_in_its_size(tmp_path: Path, pins: Path) -> None:
    """Two lines of 24 MiB that are no JSON (the server's limit is 32 MiB, its results being
    allowed 2 million characters): each line was joined from its chunks by copying it whole at
    each one, about 5 s of the host's CPU a line, on its event loop. Now a line costs what its
    size does; the calls are answered, and the honest server serves."""
    config = write_config(tmp_path, [w15(max_result_chars=2_000_000), honest_server(20)], pins_from=pins)
    steps = script(
        ("x__lookup", {"key": "junk:24"}),
        ("x__lookup", {"key": "junk:24"}),
        ("ok__lookup", {"key": "c"}),
        "done",
    )
    started = time.process_time()
    run = await run_question(config, "Q", steps)
    used = time.process_time() - started
    assert [("value-of-junk:24" in seen) for seen in run.seen("x__lookup")] == [True, True]
    assert used < 3.0, used  # before: 6 s and more
    assert "value-of-c" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_an_event_of_megabytes_in_small_chunks_is_read_linear_in_its_size() -> None:
    """A listing's event stream (what an HTTP server's ``tools/list`` answer passes through)
    of 8 MiB in chunks of 4 KiB with no event's end, then an ordinary event: each chunk copied
    all that waited (about 10 s of CPU). Now it costs what its size does, the bytes pass on whole,
    and events that end are passed on one by one as before."""
    line = b"data: " + b"d" * 4090 + b"\n"
    ordinary = b"event: message\ndata: {}\n\n"

    async def chunks() -> Any:
        for _ in range(2048):
            yield line
        yield b"\n" + ordinary

    started = time.process_time()
    out = [chunk async for chunk in cut_events(chunks(), 16 << 20)]
    used = time.process_time() - started
    assert out == [line * 2048 + b"\n", ordinary]
    assert used < 2.0, used  # before: about 10 s
