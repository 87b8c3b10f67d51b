"""A twenty-first round: the run-level paths around a model call, driven as the others are (an
agent file naming ``model.provider`` and ``model.fallback``, ``tether run`` in process and in
its own) against real servers on 127.0.0.1 speaking each protocol.

Fault fixed this round: a call id longer than the 40 characters OpenAI's chat API takes (vLLM
names its calls ``chatcmpl-tool-`` and 32 hex digits, 46 characters), sent back to an OpenAI
chat server after a fallback: the call and its result go with the id cut to 40 characters and a
digest of the whole, the two still paired (before: sent as they came, refused with HTTP 400,
every model failed, ``model_error``; ``_base.short_call_id``, used by the chat encoder). An id
of 40 characters or fewer goes as it came.

SIGINT or SIGTERM to ``tether run`` mid-stream, on every protocol: the run ends with its own stop
reason, ``interrupted`` (exit 130), as a passed deadline ends it ``deadline``: the summary
printed, the trace closed with its ``stop`` event, what the cut call was billed counted and
traced as cut by the signal, the run checkpointed where it has an approval store, and ``tether
resume`` (the command the summary names) finishes it, no call run twice. A second signal is
raised as if none were caught. Before: SIGINT printed a ``KeyboardInterrupt`` traceback and
SIGTERM killed the process, with no summary, no ``stop`` event and nothing to resume; a billed
call was traced as "cut by the run's deadline" (``runners._interrupt``, ``cli run.drive``).

The retries a model took before it failed are traced: with the switch to the next model of a
chain (``model_response``'s ``fallback_from``: each retry's kind, attempt and wait) and on the
``model_error`` that ends a run (every model's, named; ``ModelError.retries``). Before: only the
last error was said, and the waits the run spent on a model that then failed (a
``retry-after-ms``, an HTTP date gone by, backoff) were nowhere in the trace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent
from test_faults_round10 import run_agent
from test_faults_round12 import ids_in

from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

VLLM_ID = "chatcmpl-tool-" + "9f" * 16  # 46 characters, as vLLM names a call


def vllm_ids(items: list[Any]) -> list[Any]:
    """Chat: every call's id as vLLM writes it (``chatcmpl-tool-`` and 32 hex digits)."""
    for i in items:
        for choice in i.get("choices") or () if isinstance(i, dict) else ():
            for call in (choice.get("message") or choice.get("delta") or {}).get("tool_calls") or ():
                if call.get("id"):
                    call["id"] = VLLM_ID
    return items


def refuses_long_ids(replies: list[Reply]) -> Any:
    """An OpenAI chat server that, as the API does, refuses a call id or a result's
    ``tool_call_id`` over 40 characters (HTTP 400), or a result that names no call sent."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        calls, results = ids_in("openai-chat", request)
        if any(len(i) > 40 for i in calls + results) or sorted(calls) != sorted(results):
            why = "string too long. Expected a string with maximum length 40"
            return Reply.error(400, f"Invalid 'messages[2].tool_calls[0].id': {why}: {calls} / {results}")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_fallback_to_openai_chat_sends_a_long_call_id_as_it_accepts_it(
    tmp_path: Path, transport: str
) -> None:
    """A vLLM-like chat model calls ``read_order`` under a 46-character id, then fails (503,
    retried once); the chain falls back to an OpenAI chat model whose API refuses ids over 40
    characters: the call and its result go under one id of 40 characters, and the run is
    accepted (before: refused, every model failed, ``model_error``). The same id goes back to
    the first server on its retry (every chat server takes it); an id of 40 characters goes to
    the fallback as it came."""
    each: dict[str, Any] = {"max_retries": 1, "timeout_s": 5}
    down = Reply.error(503, "down")
    for edit, kept in ((vllm_ids, False), (None, True)):
        with (
            SERVERS["openai-chat"](scripted([Reply.calls(ORDER, edit=edit), down, down])) as a,
            SERVERS["openai-chat"](refuses_long_ids([Reply.text(ANSWER)])) as b,
        ):
            second = {"provider": "openai-chat", "name": "m-b", "base_url": b.url, "transport": transport}
            model = {
                "provider": "openai-chat",
                "name": "m-a",
                "base_url": a.url,
                "fallback": [{**second, **each}],
            }
            model.update(each)
            code, out, responses = run_agent(tmp_path, model)
            first_id = a.bodies()[1]["messages"][2]["tool_calls"][0]["id"]
            calls, results = ids_in("openai-chat", b.bodies()[0])
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        assert calls == results == [first_id] and len(first_id) <= 40, (calls, first_id)
        [given] = responses[0]["tool_calls"]
        assert (given["id"] == first_id) == kept and (given["id"] == VLLM_ID) != kept, (given, first_id)


# -- a signal to `tether run` mid-stream --------------------------------------------------------


def stalled(items: list[Any]) -> list[Any]:
    """The answer's first two events, then a stall a run never waits out."""
    return [*items[:2], Pause(120), *items[2:]]


def start_agent(tmp_path: Path, model: dict[str, Any]) -> Path:
    """The order agent with an approval store (``approvals.db``): a stopped run is checkpointed."""
    path = write_agent(tmp_path, model)
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec["policy"] = {"approvals_db": "approvals.db"}
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def tether_cli(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-r21", "ANTHROPIC_API_KEY": "sk-r21"}
    cmd = [sys.executable, "-m", "tether.cli", *argv, "--json"]
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(
    ("provider", "signum"),
    [("openai-chat", signal.SIGINT), ("anthropic", signal.SIGTERM), ("openai-responses", signal.SIGINT)],
)
def test_a_signal_mid_stream_stops_the_run_interrupted_and_resume_finishes_it(
    tmp_path: Path, provider: str, signum: int
) -> None:
    """SIGINT or SIGTERM to ``tether run`` while the model's second answer streams: the run
    ends ``interrupted`` (exit 130), its summary printed, the trace closed with its ``stop``
    event, what the cut call was billed traced as cut by the signal (not by a deadline), and the
    run checkpointed: ``tether resume`` (the command the summary names) finishes it with the
    answer, the tool never run twice (before: SIGINT printed a ``KeyboardInterrupt`` traceback,
    SIGTERM killed the process; no summary, no ``stop`` event, nothing to resume, and a billed
    call traced as cut by the run's deadline)."""
    asked = threading.Event()
    replies = [Reply.calls(ORDER), Reply.text(ANSWER, edit=stalled), Reply.text(ANSWER)]

    def respond(request: dict[str, Any], index: int) -> Reply:
        if index == 1:
            asked.set()
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    with SERVERS[provider](respond) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "streaming": True,
            "timeout_s": 300,
        }
        path = start_agent(tmp_path, model)
        run = tether_cli(tmp_path, "run", "Why is 742 open?", "--agent", str(path))
        assert asked.wait(60), run.communicate()
        run.send_signal(signum)
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 130, stderr
        out = json.loads(stdout.strip().splitlines()[-1])
        name = signal.Signals(signum).name
        assert (out["stop_reason"], out["answer"], out["ok"]) == ("interrupted", None, False), out
        assert out["detail"] == f"stopped by {name} while the model was answering", out
        events = [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]
        assert events[-1]["kind"] == "stop" and events[-1]["reason"] == "interrupted", events[-1]
        cut = [e["error"] for e in events if e["kind"] == "model_error"]
        assert all(f"interrupt ({name})" in e for e in cut), cut
        [resume] = out["next"]
        resumed = tether_cli(tmp_path, *resume.split()[1:])
        stdout, stderr = resumed.communicate(timeout=120)
        done = json.loads(stdout.strip().splitlines()[-1])
        assert (resumed.returncode, done["stop_reason"], done["answer"]) == (0, "accepted", ANSWER), stderr
        assert len(server.bodies()) == 3  # the call ran once: the resumed run asked for the answer only


# -- the retries a failed model took, in the trace ----------------------------------------------

PASSED = "Wed, 21 Oct 2015 07:28:00 GMT"  # an HTTP date gone by: no wait


def busy(**headers: str) -> Reply:
    return Reply.error(429, "slow down", headers=headers)


@pytest.mark.parametrize("fallback", ["anthropic", "openai-responses"])
def test_the_retries_a_failed_model_took_are_traced_with_the_switch_and_the_model_error(
    tmp_path: Path, fallback: str
) -> None:
    """The primary answers 429 three times, its waits said as ``retry-after-ms: 20``, an HTTP
    date gone by, then a 503 with none (backoff): it gives up after its two retries, and the
    fallback answers. The switch in the trace names each retry the primary took, its kind and
    its wait (before: only its last error; the waits the run spent on it were nowhere); where
    the fallback fails too, the ``model_error`` event lists every model's retries."""
    each: dict[str, Any] = {"max_retries": 2, "timeout_s": 5}
    failing = [busy(**{"retry-after-ms": "20"}), busy(**{"retry-after": PASSED}), Reply.error(503, "down")]
    for answers in (True, False):
        backup = [Reply.calls(ORDER), Reply.text(ANSWER)] if answers else [Reply.error(503, "down")] * 3
        with SERVERS["openai-chat"](scripted(failing)) as a, SERVERS[fallback](scripted(backup)) as b:
            second = {"provider": fallback, "name": "m-b", "base_url": b.url, "transport": "http", **each}
            model = {
                "provider": "openai-chat",
                "name": "m-a",
                "base_url": a.url,
                "fallback": [second],
                **each,
            }
            code, out, responses = run_agent(tmp_path, model)
        events = [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]
        first = [
            {"kind": "rate_limited", "attempt": 1, "delay_s": 0.02},
            {"kind": "rate_limited", "attempt": 2},
        ]
        if answers:
            assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
            [moved] = responses[0]["fallback_from"]
            taken = moved["retries"]
        else:
            assert (code, out["stop_reason"]) == (7, "model_error"), out
            [failed] = [e for e in events if e["kind"] == "model_error"]
            taken = failed["retries"]
            assert [r.pop("model") for r in taken] == ["m-a", "m-a", "m-b", "m-b"], taken
            assert [r["kind"] for r in taken[2:]] == ["server_error"] * 2, taken
        assert taken[0] == first[0] and taken[1]["delay_s"] == 0 and taken[1]["kind"] == "rate_limited", taken


# -- a fallback after a stream cut mid-call ------------------------------------------------------


def cut_mid_call(items: list[Any]) -> list[Any]:
    """The call's name and the first piece of its arguments, then a stall past the timeout."""
    return [*items[:3], Pause(120)]


@pytest.mark.parametrize("first", ["openai-chat", "anthropic", "openai-responses"])
def test_a_stream_cut_mid_call_moves_to_the_fallback_and_the_half_call_never_runs(
    tmp_path: Path, first: str
) -> None:
    """Held (pinned): the primary streams the start of a call (``read_order`` with a piece of its
    arguments) and stalls past its ``timeout_s``; no retry left, the chain moves to another
    protocol's model, whose call runs once and whose answer is accepted. The half call is never
    run nor sent on: the fallback's first request holds the question alone."""
    other = "anthropic" if first != "anthropic" else "openai-chat"
    each: dict[str, Any] = {"max_retries": 0, "timeout_s": 2, "streaming": True}
    with (
        SERVERS[first](scripted([Reply.calls(ORDER, edit=cut_mid_call, chunks=4)])) as a,
        SERVERS[other](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as b,
    ):
        second = {"provider": other, "name": "m-b", "base_url": b.url, **each}
        model = {"provider": first, "name": "m-a", "base_url": a.url, "fallback": [second], **each}
        code, out, responses = run_agent(tmp_path, model)
        asked = b.bodies()[0]
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
    assert "timeout" in responses[0]["fallback_from"][0]["error"], responses[0]
    assert "read_order" not in json.dumps(asked.get("messages") or asked.get("input")), asked


def test_a_run_in_process_leaves_the_callers_signal_handlers_as_they_were(tmp_path: Path) -> None:
    """``tether run`` called in process (``main``) takes SIGINT and SIGTERM only while its run
    is under way: the caller's own handlers are back after it, and the run is accepted."""

    def own(number: int, frame: object) -> None:  # pragma: no cover - never sent
        raise AssertionError(number)

    before = signal.signal(signal.SIGTERM, own)
    try:
        with SERVERS["openai-chat"](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
            code, out, _ = run_agent(
                tmp_path, {"provider": "openai-chat", "name": "m-1", "base_url": server.url}
            )
        assert (code, out["stop_reason"]) == (0, "accepted"), out
        assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)
