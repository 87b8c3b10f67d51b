"""Model faults, round forty: servers of the two OpenAI protocols (chat completions, Responses)
on 127.0.0.1 whose usage leaves the model's reasoning out of its output count, driven through
``tether run`` with an agent file for each ``model.provider`` (streamed and whole, over the SDK
transport and plain httpx) and through the Python API.

Fixed here:

- a usage whose output count leaves the reasoning tokens out (Gemini's OpenAI-compatible
  endpoint and gateways that translate it: ``completion_tokens: 0`` beside
  ``completion_tokens_details.reasoning_tokens: 60`` and ``total_tokens: 81``; the same in a
  Responses ``usage``) was taken as written: the turn's reasoning, which the provider bills as
  output, counted no tokens and cost nothing, and a token or cost budget never saw it. The
  output count is now at least the reasoning tokens and at least what ``total_tokens`` says was
  spent beyond the prompt (``_base.openai_usage``); a usage that adds up is read as before. A
  ``total_tokens`` that is no count (negative, a word) is left unread, as before.

Each fault is counted honestly (the run stops at its token budget) and a normal usage is read
as written (the run accepted, its tokens exact).

Probed, already honest (earlier rounds pin them): every documented and unknown finish/stop
reason of each protocol, with text and with a tool call, streamed and whole, over both
transports (``length``/``max_tokens``/``max_output_tokens`` → ``truncated``; ``content_filter``
/``refusal`` → ``model_refused``; ``pause_turn``, ``cancelled``, unknown words → ``model_error``,
calls never run; ``stop``/``end_turn``/``stop_sequence``/none beside a call run it).
Pinned here: headers sent at once, then the body stalled (a whole answer cut after 20 bytes, a
stream after its first event) is cut at ``timeout_s`` on every protocol and transport, the
stalled try retried and the next answer accepted; both tries stalled end ``model_error``, never
on the run's deadline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS
from test_faults_round29 import backend, complete
from test_faults_round35 import run_turns

from tether.models import Price
from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

OPENAI = ("openai-chat", "openai-responses")
EVERY = [
    pytest.param(p, t, m, id=f"{p}-{t}-{m}")
    for p in OPENAI
    for t in ("http", "sdk")
    for m in ("stream", "whole")
]


def chat_usage(prompt: int, completion: int, reasoning: int, total: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    return usage if total is None else {**usage, "total_tokens": total}


def responses_usage(prompt: int, completion: int, reasoning: int, total: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }
    return usage if total is None else {**usage, "total_tokens": total}


def usage(provider: str, prompt: int, completion: int, reasoning: int, total: int | None) -> dict[str, Any]:
    make = chat_usage if provider == "openai-chat" else responses_usage
    return make(prompt, completion, reasoning, total)


# -- fixed: reasoning left out of the output count is counted ------------------------------------

# (prompt, completion, reasoning, total): what the server wrote; the output tether must count
LEFT_OUT = [
    pytest.param((21, 0, 4000, 4021), 4000, id="no-output-reasoning-only"),  # CLIProxyAPI #5733
    pytest.param((21, 30, 4000, 4051), 4030, id="output-without-reasoning"),  # Gemini's compat
    pytest.param((21, 30, 4000, None), 4000, id="no-total-reasoning-past-output"),
]


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
@pytest.mark.parametrize(("said", "output"), LEFT_OUT)
def test_reasoning_left_out_of_the_output_count_is_counted(
    tmp_path: Path, provider: str, transport: str, mode: str, said: tuple[Any, ...], output: int
) -> None:
    """A turn that reasoned 4,000 tokens but whose usage left them out of its output count: a
    token budget of 1,000 stops the run (exit 4) after it (before: the turn counted about 50
    tokens, the run accepted)."""
    replies = [Reply.calls(ORDER, usage=usage(provider, *said)), Reply.text(ANSWER)]
    code, out, _ = run_turns(
        tmp_path, provider, replies, mode=mode, transport=transport, limits={"max_tokens": 1000}
    )
    assert (code, out["stop_reason"]) == (4, "budget"), out
    assert out["tokens"] >= said[0] + output, out


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
def test_a_usage_that_adds_up_is_read_as_written(
    tmp_path: Path, provider: str, transport: str, mode: str
) -> None:
    """OpenAI's own usage (reasoning inside the output count, the total their sum) is exact:
    the run is accepted and counts what the server said, no more."""
    first = usage(provider, 21, 4030, 4000, 4051)
    second = usage(provider, 40, 10, 0, 50)
    replies = [Reply.calls(ORDER, usage=first), Reply.text(ANSWER, usage=second)]
    code, out, _ = run_turns(
        tmp_path, provider, replies, mode=mode, transport=transport, limits={"max_tokens": 100_000}
    )
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert out["tokens"] == 4051 + 50, out


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
def test_the_python_api_counts_and_prices_the_reasoning(provider: str, transport: str, mode: str) -> None:
    """Through the backend itself: the response's usage holds the reasoning as output, and its
    cost prices it (before: 0 output tokens, the turn's cost only its prompt)."""
    reply = Reply.text(ANSWER, usage=usage(provider, 21, 0, 4000, 4021))
    with SERVERS[provider](scripted([reply])) as server:
        model = backend(
            provider,
            server.url,
            transport,
            mode == "stream",
            prices={"m-1": Price(input=1.0, output=10.0)},
        )
        response = complete(model)
    assert (response.message.content, response.usage.prompt_tokens) == (ANSWER, 21)
    assert response.usage.completion_tokens == 4000, response.usage
    assert response.usage.extra.get("reasoning_tokens") == 4000, response.usage
    assert response.cost_usd == pytest.approx((21 * 1.0 + 4000 * 10.0) / 1_000_000), response


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
@pytest.mark.parametrize("total", [-5, "n/a", [81]], ids=["negative", "word", "list"])
def test_a_total_that_is_no_count_is_left_unread(
    tmp_path: Path, provider: str, transport: str, mode: str, total: Any
) -> None:
    """``total_tokens`` was never read before this round: one that is no count does not make an
    answer whose own counts read unusable (the run accepted, its tokens the counts given)."""
    said = {**usage(provider, 21, 30, 0, None), "total_tokens": total}
    replies = [Reply.text(ANSWER, usage=said)]
    code, out, _ = run_turns(tmp_path, provider, replies, mode=mode, transport=transport)
    assert (code, out["stop_reason"], out["answer"], out["tokens"]) == (0, "accepted", ANSWER, 51), out


# -- pinned: headers at once, then the body stalls ----------------------------------------------


def stalled_body(mode: str) -> Reply:
    """An answer whose headers go out at once and whose body stops: a whole answer after its
    first 20 bytes, a stream after its first event; the rest 20 s later (past the run)."""

    def edit(items: list[Any]) -> list[Any]:
        if mode == "stream":
            return [items[0], Pause(20), *items[1:]]
        raw = items[0] if isinstance(items[0], bytes) else json.dumps(items[0]).encode()
        return [raw[:20], Pause(20), raw[20:]]

    return Reply.text("STALLED-" + ANSWER, edit=edit)


ALL = [
    pytest.param(p, t, m, id=f"{p}-{t}-{m}")
    for p in sorted(SERVERS)
    for t in ("http", "sdk")
    for m in ("stream", "whole")
]


@pytest.mark.parametrize(("provider", "transport", "mode"), ALL)
def test_a_body_that_stalls_after_its_headers_is_cut_at_the_timeout(
    tmp_path: Path, provider: str, transport: str, mode: str
) -> None:
    replies = [stalled_body(mode), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode, transport=transport, timeout_s=1.0)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out

    replies = [stalled_body(mode), stalled_body(mode), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode, transport=transport, timeout_s=1.0)
    assert (code, out["stop_reason"], len(bodies)) == (7, "model_error", 2), out
    assert "STALLED" not in str(out.get("answer")), out
