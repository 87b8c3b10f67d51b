"""Wild servers, round eight (``wild8_server.py``, written by hand, over real stdio; round six's
Streamable HTTP server by hand): a server that floods the host with requests of its own while it
has stopped reading what the host sends (its stdin full, or the host's POSTs held), sampling
requests and questions sent together outside any call. Each runs next to an honest server, and
both are checked: the hostile one is contained (bounded memory, the call's deadline kept, the
next call told why at once, the server's budgets and the person's share of questions kept), the
honest one serves."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tether.core.messages import AssistantMessage, Usage
from tether.core.stop import StopReason
from tether.mcp._config import ElicitationConfig, SamplingConfig
from tether.mcp._elicitation import Answer, CallInfo, ElicitationGate, ScriptedResponder
from tether.mcp._sampling import SamplingGate
from tether.mcp._tasks import MAX_UNSENT
from tether.mcphost._runner import run_question
from tether.models._base import ModelRequest, ModelResponse
from tether.trace._tracer import read_trace
from tether_testing.loopback import serving

from .conftest import approve, script, write_config
from .test_wild_round6 import _wild_http

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

SERVER = Path(__file__).with_name("wild8_server.py")


def w8(name: str, mode: str = "honest", **extra: Any) -> dict[str, Any]:
    """The server in ``mode``, unconfined (launched faster)."""
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "env": {"W8_MODE": mode, **extra.pop("env", {})},
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 20,
        "sandbox": "none",
        **extra,
    }


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``lookup`` for servers x and ok (the pin is for the command, the same in
    every mode: saves two launches a test)."""
    folder = tmp_path_factory.mktemp("w8pins")
    config = write_config(folder, [w8("x"), w8("ok")])

    async def go() -> None:
        for name in ("x", "ok"):
            await approve(config, name)

    anyio.run(go)
    return folder / "pins.db"


def _trace(run: Any) -> list[dict[str, Any]]:
    assert run.result.trace_path is not None
    return read_trace(run.result.trace_path)


def _took(events: list[dict[str, Any]], call_id: str) -> float:
    """Seconds from a call's proposal to its observation, from the trace."""
    at = {e["kind"]: datetime.fromisoformat(e["ts"]) for e in events if e.get("call_id") == call_id}
    return (at["tool_observation"] - at["tool_proposed"]).total_seconds()


async def test_a_request_storm_to_a_host_the_server_no_longer_reads_is_bounded_and_keeps_the_deadline(
    tmp_path: Path, pins: Path
) -> None:
    """5 000 pings while the server reads nothing more: the SDK spawned a task for each, blocked
    writing its answer to the full stdin (thousands of tasks: memory grew with the
    storm), and the call's cancellation waited 5 s more on the SDK's courtesy cancel (a 4 s
    timeout took 9 s). Now at most ``MAX_UNSENT`` of the host's messages wait for the server;
    past that an answer or notice is dropped (traced once) and a request fails at once, naming
    why; the other server serves."""
    config = write_config(tmp_path, [w8("x", "storm", timeout_s=4), w8("ok")], pins_from=pins)
    steps = script(
        ("x__lookup", {"key": "a"}),
        ("ok__lookup", {"key": "d"}),
        ("x__lookup", {"key": "b"}),
        ("x__lookup", {"key": "c"}),
        "done",
    )
    peak = 0

    async def count_tasks() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(asyncio.all_tasks()))
            await anyio.sleep(0.05)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(count_tasks)
        run = await run_question(config, "Q", steps)
        tg.cancel_scope.cancel()
    took = time.monotonic() - started
    events = _trace(run)
    said = [(o.tool, o.text) for o in run.result.observations]
    assert [tool for tool, _ in said] == ["x__lookup", "ok__lookup", "x__lookup", "x__lookup"]
    assert "value-of-a" in said[0][1] and "value-of-d" in said[1][1]
    assert "timed out after 4s" in said[2][1] and _took(events, "call_3_0") < 4 + 2  # before: 9 s
    assert "not reading what the host sends" in said[3][1] and _took(events, "call_4_0") < 2  # before: 9 s
    assert peak < 10 * MAX_UNSENT  # before: thousands
    dropped = [e for e in events if e["kind"] == "mcp_connection" and e.get("action") == "unsent_dropped"]
    assert dropped and dropped[0]["server"] == "x" and dropped[0]["waiting"] == MAX_UNSENT
    # Unavailable twice, the run ends on it (as after two timeouts, only sooner).
    assert run.result.stop_reason is StopReason.DEPENDENCY_UNAVAILABLE
    assert took < 20


class _SlowSampler:
    """A sampling model that takes ``delay_s`` per answer, each ``tokens`` tokens."""

    name = "sampler"

    def __init__(self, delay_s: float, tokens: int = 10) -> None:
        self.delay_s, self.tokens, self.requests = delay_s, tokens, 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        await anyio.sleep(self.delay_s)
        return ModelResponse(
            AssistantMessage(content="a summary"), Usage(self.tokens, self.tokens), "sampler"
        )


async def test_sampling_requests_sent_together_share_the_servers_budget_of_seconds(
    tmp_path: Path, pins: Path
) -> None:
    """Five sampling requests at once, outside any call (no call's cap applies): each was checked
    against the server's budget before any had used it, so all five ran together, each allowed
    the whole ``max_seconds`` (0.8 s of model time allowed, 2.5 s used). Now one sample runs at a
    time, each checked and charged before the next: one answered, the rest refused as the
    budget is spent; the honest server serves."""
    sampling = {
        "enabled": True,
        "max_calls": 5,
        "max_calls_per_call": 5,
        "max_seconds": 0.8,
        "max_tokens": 64,
    }
    config = write_config(tmp_path, [w8("x", "sample_burst", sampling=sampling), w8("ok")], pins_from=pins)
    sampler = _SlowSampler(0.5)
    steps = script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "b"}), "done")
    run = await run_question(config, "Q", steps, sampling_model=sampler, sampling_consent=lambda prompt: True)
    assert "value-of-a sampled=1 refused=4" in run.seen("x__lookup")[0]  # before: sampled=5
    assert sampler.requests == 2  # the second stopped when the budget's seconds ran out
    rows = [e for e in _trace(run) if e["kind"] == "mcp_sampling"]
    assert [r["outcome"] for r in rows].count("answered") == 1
    assert all("budget exhausted" in r["reason"] for r in rows if r["outcome"] == "refused")
    assert "value-of-b" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_sampling_requests_sent_together_share_the_servers_budget_of_tokens() -> None:
    """The same at the gate, for tokens: 30 a sample, 50 allowed; five at once all ran (150)."""
    gate = SamplingGate(
        "s",
        SamplingConfig(enabled=True, max_calls=10, max_total_tokens=50, max_tokens=20),
        model=_SlowSampler(0.05, tokens=15),
        consent=lambda prompt: True,
    )
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(await gate(None, types.CreateMessageRequestParams(messages=[message], max_tokens=20)))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(ask)
    sampled = [a for a in answers if isinstance(a, types.CreateMessageResult)]
    assert len(sampled) == 2 and gate.budget.tokens == 60  # before: 5 and 150
    assert all("60/50 tokens" in a.message for a in answers if isinstance(a, types.ErrorData))


async def test_questions_a_server_asks_outside_any_call_are_refused_and_the_person_never_asked(
    tmp_path: Path, pins: Path
) -> None:
    """Six questions at once as soon as the server is initialized: no call in flight, so no call's
    share (``max_questions_per_call``) applied, and the person was asked all six. Now a question
    that belongs to no call is declined before anyone sees it; the calls serve."""
    asking = w8("x", "ask_burst", env={"W8_SAMPLES": "6"}, elicitation={"enabled": True})
    config = write_config(tmp_path, [asking, w8("ok")], pins_from=pins)
    person = ScriptedResponder([Answer("accept", {"city": "Paris"})] * 6)
    steps = script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "b"}), "done")
    run = await run_question(config, "Q", steps, responder=person)
    assert person.shown == []  # before: all six
    assert "value-of-a decline=6" in run.seen("x__lookup")[0]
    rows = [e for e in _trace(run) if e["kind"] == "mcp_elicitation"]
    assert [r["reason"] for r in rows] == ["a question outside any tool call"] * 6
    assert "value-of-b" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_question_while_several_calls_are_in_flight_counts_against_each() -> None:
    """Two calls in flight: the question could belong to either, so it was charged to neither and
    a server asked without limit. Now it counts against both; past their share it is refused,
    and a gate used on its own (no calls known) still asks."""
    first, second = CallInfo("r", "c1", "t", {}), CallInfo("r", "c2", "t", {})
    person = ScriptedResponder([Answer("accept", {"city": "Paris"})] * 5)
    gate = ElicitationGate(
        "s",
        ElicitationConfig(enabled=True, max_questions_per_call=3),
        responder=person,
        calls_in_flight=lambda: [first, second],
    )
    form = {"type": "object", "properties": {"city": {"type": "string"}}}
    question = types.ElicitRequestFormParams(message="Which city?", requested_schema=form)
    answers = [await gate(None, question) for _ in range(5)]
    assert [a.action for a in answers] == ["accept"] * 3 + ["decline"] * 2  # before: five accepted
    assert len(person.shown) == 3 and first.questions == second.questions == 5
    alone = ElicitationGate(
        "s", ElicitationConfig(enabled=True), responder=ScriptedResponder([Answer("cancel")])
    )
    assert (await alone(None, question)).action == "cancel"


def _storming_web() -> type[Any]:
    """Round six's Streamable HTTP server (by hand), except: the call of ``b`` is answered by an
    event stream of 3 000 pings of the server's own and no answer, and every answer the host
    POSTs is held unacknowledged (10 s)."""
    base_app = _wild_http("plain", [])

    class App(base_app):  # type: ignore[misc,valid-type]  (a class made at run time)
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            message = json.loads(raw)
            if "method" not in message:  # the host's answer to a ping: never acknowledged
                time.sleep(10)
                return
            if ((message.get("params") or {}).get("arguments") or {}).get("key") == "b":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                pings = (json.dumps({"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"}) for n in range(3000))
                with contextlib.suppress(OSError):
                    self.wfile.write(b"".join(f"event: message\ndata: {p}\n\n".encode() for p in pings))
                    self.wfile.flush()
                    time.sleep(10)
                return
            connection, self.rfile = self.rfile, io.BytesIO(raw)  # the body again, for round six's
            try:
                super().do_POST()
            finally:
                self.rfile = connection  # (the next request on this connection comes from it)

    return App


async def test_a_request_storm_over_http_to_a_host_whose_answers_are_held_is_bounded_the_same_way(
    tmp_path: Path, pins: Path
) -> None:
    """The same storm over Streamable HTTP: each answer POSTed waits for its acknowledgement (5 s,
    ``ACK_WAIT_S``) before the next is sent, so the SDK's tasks answering pings piled up (about
    3 000), the call's timeout of 4 s took 9 s and the next call waited out its own. Now
    bounded, the deadline kept, and the next call told why at once."""
    with serving(_storming_web()) as base:
        web = {
            "name": "web",
            "url": f"{base}/mcp",
            "mode": "legacy",
            "effects": {"lookup": "read"},
            "timeout_s": 4,
        }
        config = write_config(tmp_path, [web, w8("ok")], pins_from=pins)
        await approve(config, "web")
        steps = script(
            ("web__lookup", {"key": "a"}),
            ("ok__lookup", {"key": "d"}),
            ("web__lookup", {"key": "b"}),
            ("web__lookup", {"key": "c"}),
            "done",
        )
        peak = 0

        async def count_tasks() -> None:
            nonlocal peak
            while True:
                peak = max(peak, len(asyncio.all_tasks()))
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(count_tasks)
            run = await run_question(config, "Q", steps)
            tg.cancel_scope.cancel()
    events = _trace(run)
    said = [(o.tool, o.text) for o in run.result.observations]
    assert "value-of-a" in said[0][1] and "value-of-d" in said[1][1]
    assert "timed out after 4s" in said[2][1] and _took(events, "call_3_0") < 4 + 2  # before: 9 s
    assert "not reading what the host sends" in said[3][1] and _took(events, "call_4_0") < 2  # before: 4 s
    assert peak < 10 * MAX_UNSENT  # before: about 3 000
    assert any(e.get("action") == "unsent_dropped" and e["server"] == "web" for e in events)
