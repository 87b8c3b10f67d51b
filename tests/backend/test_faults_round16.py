"""A sixteenth round: fallback chains and budgets under faults, driven as the others are (an
agent file naming ``model.provider`` and ``model.fallback``, ``tether run`` in process) against
real servers on 127.0.0.1 speaking each protocol, providers mixed in one chain.

A primary whose key the server refuses (401) while its fallback answers: the run is answered
by the fallback (as documented: a 401 moves to the next model) and the command's summary says
so — ``model_fallbacks`` lists the model left, its error and the model moved to, with a fix
naming the key variable, and the terminal view prints it as a warning (before: the switch was
in the trace's ``model_response`` only; the summary said ``accepted``, exit 0, nothing about the
refused key, so a misconfigured key stayed hidden behind the backup; ``clisupport.output``).

``--no-stream`` ("whole responses, even if the agent file asks for a stream") holds for every
model of ``model.fallback`` (before: for the primary only, so a run that fell back streamed
after all, from a server the operator had just said cannot; ``agents._file.with_overrides``).

A stream cut after it streamed answer but before its server reported usage (chat: no usage
chunk; Responses: no terminal event) is counted by estimate — the request read, the pieces
written, about four characters a token — across retries (``failed_attempts_billed``, flagged
``estimated``), across a fallback chain (``fallback_billed``) and into the ``model_error`` when
every model fails (before: such an attempt cost the run nothing, so a server or proxy that cut
each stream before its usage passed every token and cost budget; ``models._retrying.streamed``,
called by each protocol's stream reader). An attempt whose server reported usage keeps its counts.

Held as they were: a truncated final answer from the primary is an answer — the run ends
``truncated`` (exit 7), the fallback never asked; each model of a mixed chain is priced by its
own price and a fallback's turn that crosses ``max_cost_usd`` stops the run ``budget``; a
primary's ``retry-after`` past the deadline fails it at once, naming why, and the fallback answers.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent

from tether.cli import main
from tether_testing.fake_server import FakeChatServer, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_model_retries")]

KEY = "TETHER_ROUND16_KEY"


def run_cli(tmp_path: Path, model: dict[str, Any], *extra: str) -> tuple[int, str]:
    """``tether run --agent`` with ``model`` and ``extra`` options: exit code, standard output."""
    out = io.StringIO()
    path = str(write_agent(tmp_path, model))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "Why is 742 open?", "--agent", path, *extra])
    return code, out.getvalue()


def summary(text: str) -> dict[str, Any]:
    return json.loads(text.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("fallback", ["anthropic", "openai-responses"])
def test_a_refused_key_on_the_primary_is_said_when_the_fallback_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback: str
) -> None:
    monkeypatch.setenv(KEY, "sk-wrong-round16")
    for view in ("--json", None):
        with (
            FakeChatServer(scripted([Reply.error(401, "invalid api key")])) as primary,
            SERVERS[fallback](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
        ):
            model = {
                "name": "primary-m", "base_url": primary.url, "api_key_env": KEY,
                "fallback": [{"provider": fallback, "name": "backup-m", "base_url": backup.url}],
            }  # fmt: skip
            code, text = run_cli(tmp_path, model, *([view] if view else []))
            assert len(primary.received) == 1 and len(backup.received) == 2  # 401: not retried
        if view:
            out = summary(text)
            assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER)
            [moved] = out["model_fallbacks"]
            assert (moved["model"], moved["to"]) == ("primary-m", "backup-m")
            assert "HTTP 401" in moved["error"] and f"${KEY} holds a key the server refused" in moved["fix"]
            assert "sk-wrong-round16" not in text
        else:
            assert code == 0 and f"answer: {ANSWER}" in text
            assert "warning: model primary-m failed, the run moved to backup-m: " in text
            assert f"fix: ${KEY} holds a key" in text


def test_a_run_that_never_falls_back_lists_no_switch_and_an_unset_key_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as only:
        code, text = run_cli(tmp_path, {"name": "m-1", "base_url": only.url}, "--json")
    assert code == 0 and "model_fallbacks" not in summary(text)
    monkeypatch.delenv(KEY, raising=False)
    with (
        FakeAnthropicServer(scripted([FakeAnthropicServer.error(403, "forbidden")])) as primary,
        FakeChatServer(scripted([Reply.text(ANSWER)])) as backup,
    ):
        model = {
            "provider": "anthropic", "name": "claude-r16", "base_url": primary.url, "api_key_env": KEY,
            "fallback": [{"name": "local-r16", "base_url": backup.url}],
        }  # fmt: skip
        code, text = run_cli(tmp_path, model, "--json")
    [moved] = summary(text)["model_fallbacks"]
    assert code == 0 and f"${KEY} is not set" in moved["fix"]


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_no_stream_on_the_command_line_holds_for_the_fallback_models(tmp_path: Path, provider: str) -> None:
    """The primary (Responses) is unavailable (404, final); the fallback's file entry asks for a
    stream. With ``--no-stream`` it is asked for whole responses; without, it streams as filed."""
    for extra, streamed in (("--no-stream", False), (None, True)):
        with (
            FakeResponsesServer(scripted([FakeResponsesServer.error(404, "no such model")])) as primary,
            SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
        ):
            filed = {"provider": provider, "name": "b-1", "base_url": backup.url, "streaming": True}
            model = {
                "provider": "openai-responses",
                "name": "gone",
                "base_url": primary.url,
                "fallback": [filed],
            }
            code, text = run_cli(tmp_path, model, "--json", *([extra] if extra else []))
            asked = [bool(body.get("stream")) for body in backup.bodies()]
        out = summary(text)
        assert (code, out["answer"]) == (0, ANSWER)
        assert asked == [streamed, streamed], (extra, asked)


# -- a stream cut before its server reported usage ---------------------------------------------------

PRICED = {"m-1": {"input": 1_000_000.0, "output": 1_000_000.0}}  # $1 a token: the cost is the count


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses"])
def test_a_stream_cut_before_its_usage_is_counted_by_estimate(tmp_path: Path, provider: str) -> None:
    """The first attempt streams the answer's text, then the stream ends before its finish (no
    usage chunk, no terminal event): retried, the next attempt answers. The run counts the cut
    attempt's tokens, estimated (the request read, the text written), priced, and the turn's
    ``model_response`` says so (before: the cut attempt cost the run nothing — a server that cuts
    every stream just before its usage was never counted by any budget). A stream that ends
    normally is counted as its server said, nothing estimated."""
    model: dict[str, Any] = {"provider": provider, "name": "m-1", "streaming": True, "prices": PRICED}
    model.update(max_retries=1, timeout_s=5)
    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, text = run_cli(tmp_path, {**model, "base_url": server.url}, "--json")
    clean = summary(text)
    assert (code, clean["answer"], clean["tokens"], clean["cost_usd"]) == (0, ANSWER, 220, 220), clean
    cut = Reply.text(ANSWER, cut="before_finish")
    with SERVERS[provider](scripted([Reply.calls(ORDER), cut, Reply.text(ANSWER)])) as server:
        code, text = run_cli(tmp_path, {**model, "base_url": server.url}, "--json")
    out = summary(text)
    responses = [e for e in trace(out) if e["kind"] == "model_response"]
    said = responses[1]["failed_attempts_billed"]
    assert said["estimated"] is True and said["completion_tokens"] >= len(ANSWER) // 4, said
    assert said["prompt_tokens"] > 0 and said["cost_usd"] == said["prompt_tokens"] + said["completion_tokens"]
    assert (code, out["answer"]) == (0, ANSWER)
    assert (out["tokens"], out["cost_usd"]) == (220 + said["cost_usd"], 220 + said["cost_usd"]), out
    assert "failed_attempts_billed" not in responses[0]


def test_a_fallback_chain_counts_the_primary_s_cut_stream_and_every_model_failing_too(tmp_path: Path) -> None:
    """Chat primary (no retries) cuts its stream before usage; the Anthropic fallback answers:
    the primary's estimate is in ``fallback_billed`` and the run's tokens. Both cutting: the run
    ends ``model_error`` naming both, their estimates counted (before: 0 tokens)."""
    fallback = {"provider": "anthropic", "name": "m-1", "streaming": True, "max_retries": 0}
    model: dict[str, Any] = {"name": "m-1", "streaming": True, "prices": PRICED, "max_retries": 0}
    cut = Reply.text(ANSWER, cut="before_finish")
    with (
        FakeChatServer(scripted([cut])) as primary,
        FakeAnthropicServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
    ):
        model.update(base_url=primary.url, fallback=[{**fallback, "base_url": backup.url}])
        code, text = run_cli(tmp_path, model, "--json")
    out = summary(text)
    first = next(e for e in trace(out) if e["kind"] == "model_response")
    left = first["fallback_billed"]
    assert (
        (code, out["answer"]) == (0, ANSWER) and left["prompt_tokens"] > 0 and left["completion_tokens"] > 0
    )
    assert out["tokens"] == 220 + left["prompt_tokens"] + left["completion_tokens"], out
    with (
        FakeChatServer(scripted([cut])) as primary,
        FakeAnthropicServer(scripted([Reply.text(ANSWER, cut="mid_chunk")])) as backup,
    ):
        model.update(base_url=primary.url, fallback=[{**fallback, "base_url": backup.url}])
        code, text = run_cli(tmp_path, model, "--json")
    out = summary(text)
    assert (code, out["stop_reason"]) == (7, "model_error") and out["tokens"] > 0, out
    assert "m-1" in out["message"] and "every model failed" in out["message"]


def trace(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]


# -- held as they were --------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_truncated_final_is_an_answer_the_chain_does_not_fall_back_from(
    tmp_path: Path, provider: str
) -> None:
    """The primary's final answer is cut at the token limit: an answer, not a failure — the run
    ends ``truncated`` (exit 7, the partial answer flagged), the fallback never asked, never
    ``accepted`` through a silent switch."""
    raw = {"openai-chat": "length", "openai-responses": "max_output_tokens", "anthropic": "max_tokens"}
    with (
        SERVERS[provider](scripted([Reply.text("742 is op", finish_reason=raw[provider])])) as primary,
        FakeChatServer(scripted([Reply.text(ANSWER)])) as backup,
    ):
        model = {"provider": provider, "name": "m-1", "base_url": primary.url}
        code, text = run_cli(
            tmp_path, {**model, "fallback": [{"name": "b-1", "base_url": backup.url}]}, "--json"
        )
        assert backup.received == []
    out = summary(text)
    assert (code, out["stop_reason"]) == (7, "truncated") and "model_fallbacks" not in out


def test_each_model_of_a_chain_is_priced_by_its_own_price_and_the_fallback_trips_the_budget(
    tmp_path: Path,
) -> None:
    """The primary (priced $1 a token) is overloaded; the fallback is priced $10 a token: its first
    turn (110 tokens, $1100) crosses ``max_cost_usd`` 500 and the run stops ``budget``; under a
    budget it stays within, its answer is accepted and costs $10 a token."""
    prices = {"cheap": {"input": 1e6, "output": 1e6}, "dear": {"input": 1e7, "output": 1e7}}
    for cap, stop in ((500.0, "budget"), (10_000.0, "accepted")):
        with (
            FakeAnthropicServer(scripted([FakeAnthropicServer.error(529, "Overloaded")])) as primary,
            FakeResponsesServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
        ):
            model = {
                "provider": "anthropic", "name": "cheap", "base_url": primary.url, "max_retries": 0,
                "prices": prices, "limits": {"max_cost_usd": cap, "final_turn_on_budget": False},
                "fallback": [{"provider": "openai-responses", "name": "dear", "base_url": backup.url}],
            }  # fmt: skip
            code, text = run_cli(tmp_path, model, "--json")
        out = summary(text)
        assert (out["stop_reason"], code == 0) == (stop, stop == "accepted"), out
        assert out["cost_usd"] == 10 * out["tokens"] and (out["cost_usd"] > cap) == (stop == "budget"), out


def test_a_retry_after_past_the_deadline_moves_to_the_fallback_at_once(tmp_path: Path) -> None:
    """The primary answers 429 with ``retry-after: 30`` under a 20 s deadline: waiting would only
    end the run at its deadline, so the primary fails at once naming why, and the fallback answers
    (the primary asked once); the summary says the run moved."""
    busy = Reply.error(429, "slow down", headers={"retry-after": "30"})
    with (
        FakeChatServer(scripted([busy])) as primary,
        FakeAnthropicServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
    ):
        model = {
            "name": "m-1", "base_url": primary.url, "limits": {"deadline_s": 20},
            "fallback": [{"provider": "anthropic", "name": "b-1", "base_url": backup.url}],
        }  # fmt: skip
        code, text = run_cli(tmp_path, model, "--json")
        assert len(primary.received) == 1 and len(backup.received) == 2
    out = summary(text)
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    [moved] = out["model_fallbacks"]
    assert "Retry-After of 30s would pass the deadline" in moved["error"] and "fix" not in moved
