"""Model faults, round thirty-nine: servers of each protocol (chat completions, Responses,
Anthropic Messages) on 127.0.0.1 whose error answers and rate limits are written the way other
gateways write them, driven through ``tether run`` with an agent file for each
``model.provider`` (streamed and whole, over the SDK transport and plain httpx) and through the
Python API.

Fixed here:

- an error body that is a JSON array holding the error object (Google's OpenAI-compatible
  endpoint answers ``[{"error": {"code": 400, "message": …, "status": "INVALID_ARGUMENT"}}]``)
  was quoted as Python's repr of the list (``[{'error': {'code': 400, …}}]``), its kind never
  named; it is read as the object it holds, its ``status`` the kind (``_failures.error_body``);
- a 200 whose body is such a list was "not a JSON object", retried whatever it held (a 400's
  refusal asked for again); it is the error it holds, final or retried as its code says
  (``_body._read_json``);
- a 429 whose rate-limit headers give the reset as a bare number of seconds (Cerebras'
  ``x-ratelimit-reset-tokens-minute: 11.38``), under no limit name (``x-ratelimit-reset``) or
  in the IETF draft's ``ratelimit-reset``/``ratelimit-remaining``, or whose body says when to
  try again only in Google's ``RetryInfo`` (``"retryDelay": "3s"``), was asked again after a
  backoff of milliseconds, each retry spent against a limit that had said when it resets. The
  wait is now the one said (a number past 10^9 is a Unix time, in ms past 10^12), and one past
  ``max_retry_after_s`` ends the call at once (``_failures.rate_reset``, ``body_delay``).

Each fault ends honestly (a typed stop, non-zero exit, the message naming the server's words)
and the same server's normal answer after it is accepted.

Probed, already honest; pinned here: a fallback chain whose first model answers only long after
its ``timeout_s`` (each try cut at the timeout, the fast fallback's call run once and its answer
accepted); 2,000 one-character argument deltas and 20,000 one-character text deltas (read
whole, the call run, the answer exact). Probed and left unpinned (already covered by earlier
rounds or accepted as they should be): dropping, repeating or swapping any one event of a call's
or an answer's stream on each protocol; Anthropic citations, server-tool, MCP-connector,
code-execution and redacted-thinking blocks; Responses ``reasoning_text``, code-interpreter,
web-search, image-generation and file-search items and annotation events; chat annotations.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from backend_support import Sleeps
from test_faults_heldout import ANSWER, SERVERS
from test_faults_round29 import backend, complete, error_object, run_json
from test_faults_round35 import run_turns

from tether.errors import ModelError
from tether.models import RetryPolicy
from tether.models._failures import error_body, rate_reset, retry_after
from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = sorted(SERVERS)
EVERY = [
    pytest.param(p, t, m, id=f"{p}-{t}-{m}")
    for p in PROVIDERS
    for t in ("http", "sdk")
    for m in ("stream", "whole")
]


def google_error(code: int, status: str, message: str, *details: dict[str, Any]) -> list[dict[str, Any]]:
    """An error as Google's OpenAI-compatible endpoint writes it: a one-item JSON array."""
    inner: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        inner["details"] = list(details)
    return [{"error": inner}]


def retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


# -- fixed: an error body in a list is read as the object it holds --------------------------------


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
def test_an_error_in_a_list_is_named_by_its_words_not_a_repr(
    tmp_path: Path, provider: str, transport: str, mode: str
) -> None:
    """A 400 whose body is ``[{"error": {…}}]`` ends the run ``model_error`` at once (exit 7)
    naming its status and message (before: Python's repr of the list); a 503 so written is
    retried and the server's next answer accepted."""
    bad = Reply(
        status=400,
        error_body=google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."),
    )
    code, out, bodies = run_turns(
        tmp_path, provider, [bad, Reply.text(ANSWER)], mode=mode, transport=transport
    )
    assert (code, out["stop_reason"], len(bodies)) == (7, "model_error", 1), out
    assert "HTTP 400: INVALID_ARGUMENT: API key not valid. Please pass a valid API key." in out["message"], (
        out
    )
    assert "[{'error'" not in out["message"] and "{'code'" not in out["message"], out["message"]

    busy = Reply(status=503, error_body=google_error(503, "UNAVAILABLE", "The model is overloaded."))
    code, out, bodies = run_turns(
        tmp_path, provider, [busy, Reply.text(ANSWER)], mode=mode, transport=transport
    )
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out


@pytest.mark.parametrize(("provider", "transport"), [(p, t) for p in PROVIDERS for t in ("http", "sdk")])
def test_a_200_holding_an_error_in_a_list_is_that_error(
    tmp_path: Path, provider: str, transport: str
) -> None:
    """A whole answer with status 200 whose body is ``[{"error": {…}}]``: a 400 inside ends the
    run at once naming it (before: retried as "not a JSON object", the same refusal asked for
    again); a 503 inside is retried and the next answer accepted."""

    def body(code: int, status: str, message: str) -> Reply:
        raw = json.dumps(google_error(code, status, message)).encode()
        return Reply.text(ANSWER, edit=lambda items: [raw])

    bad = body(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
    code, out, bodies = run_turns(
        tmp_path, provider, [bad, bad, Reply.text(ANSWER)], mode="whole", transport=transport
    )
    assert (code, out["stop_reason"], len(bodies)) == (7, "model_error", 1), out
    assert (
        "reported INVALID_ARGUMENT in a 200 answer: Request contains an invalid argument." in out["message"]
    ), out

    busy = body(503, "UNAVAILABLE", "The model is overloaded.")
    code, out, bodies = run_turns(
        tmp_path, provider, [busy, Reply.text(ANSWER)], mode="whole", transport=transport
    )
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded"),
            ("RESOURCE_EXHAUSTED", "Quota exceeded", True),
        ),
        ([{"error": {"type": "server_error", "message": "boom"}}], ("server_error", "boom", True)),
        ([], (None, "[]", None)),
        (["just words"], (None, "just words", None)),
        (
            {"error": {"message": "plain", "type": "invalid_request_error"}},
            ("invalid_request_error", "plain", False),
        ),
    ],
    ids=["google-429", "openai-in-list", "empty-list", "list-of-text", "plain-object"],
)
def test_error_body_reads_an_error_in_a_list(body: object, said: tuple[Any, ...]) -> None:
    """The reader alone: an error object in a one-item list is that object; anything else
    in a list is said as JSON text, never as Python's repr."""
    assert error_body(body) == said


# -- fixed: rate-limit resets as bare seconds, unnamed limits, IETF names, Google's RetryInfo ------


def test_reset_headers_as_bare_numbers_and_other_names_are_read() -> None:
    """``rate_reset`` alone: a bare number of seconds (fractional, Cerebras'
    ``-tokens-minute``), a limit with no name, the IETF draft's names, a Unix time (seconds and
    milliseconds); an unspent limit's reset is the soonest; words are no reset."""
    now = time.time()
    assert (
        rate_reset({"x-ratelimit-remaining-tokens-minute": "0", "x-ratelimit-reset-tokens-minute": "11.38"})
        == 11.38
    )
    assert rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4"}) == 4.0
    assert rate_reset({"RateLimit-Remaining": "0", "RateLimit-Reset": "7"}) == 7.0
    assert (
        19 < (rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(now + 20))}) or 0) <= 20
    )
    assert (
        19
        < (rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int((now + 20) * 1000))}) or 0)
        <= 20
    )
    assert rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(now - 100))}) == 0.0
    assert rate_reset({"x-ratelimit-reset-requests": "9", "x-ratelimit-reset-tokens": "2.5"}) == 2.5
    assert rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "soon"}) is None
    assert rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "nan"}) is None
    assert rate_reset({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "-5"}) is None
    assert rate_reset({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}) == 360.0
    assert retry_after({"x-ratelimit-reset": "4"}) is None  # a reset is no retry-after


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY)
def test_a_429_waits_the_reset_its_gateway_says(provider: str, transport: str, mode: str) -> None:
    """429s that say when to try again only as a bare number of seconds, under no limit name,
    under the IETF names, or in the body's ``RetryInfo``: each wait is the one said (before:
    a backoff of milliseconds each, the retries spent against a spent limit), then the answer
    after is accepted."""
    e = error_object(provider)
    replies = [
        Reply(status=429, error_body=e, headers={"x-ratelimit-remaining-tokens-minute": "0",
                                                 "x-ratelimit-reset-tokens-minute": "11.38",
                                                 "x-ratelimit-remaining-requests-day": "14000",
                                                 "x-ratelimit-reset-requests-day": "33011.38"}),
        Reply(status=429, error_body=e, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4"}),
        Reply(status=429, error_body=e, headers={"ratelimit-remaining": "0", "ratelimit-reset": "7"}),
        Reply(status=429, error_body=google_error(429, "RESOURCE_EXHAUSTED", "Slow down", retry_info("3s"))),
        Reply(status=503, error_body=google_error(503, "UNAVAILABLE", "Busy", retry_info("1.5s"))),
        Reply(status=429, error_body=google_error(429, "RESOURCE_EXHAUSTED", "Slow down", retry_info("3s")),
              headers={"retry-after": "2"}),  # the header wins
        Reply.text(ANSWER),
    ]  # fmt: skip
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=9, base_delay_s=0.01)
    with SERVERS[provider](scripted(replies)) as server:
        response = complete(
            backend(provider, server.url, transport, mode == "stream", retry=policy, sleep=sleeps)
        )
        assert len(server.bodies()) == 7
    assert response.message.content == ANSWER
    assert sleeps.waits == [11.38, 4.0, 7.0, 3.0, 1.5, 2.0], sleeps.waits


@pytest.mark.parametrize(("provider", "transport", "mode"), EVERY[::3])
def test_a_429_whose_gateway_reset_is_past_the_longest_wait_ends_at_once(
    provider: str, transport: str, mode: str
) -> None:
    """A spent daily limit that resets in nine hours (bare seconds), or a ``RetryInfo`` of an
    hour: the call ends at once (``Retry-After too long``), never asked again."""
    e = error_object(provider)
    day = {"x-ratelimit-remaining-requests-day": "0", "x-ratelimit-reset-requests-day": "33011.38"}
    for reply in (
        Reply(status=429, error_body=e, headers=day),
        Reply(status=429, error_body=google_error(429, "RESOURCE_EXHAUSTED", "Later", retry_info("3600s"))),
    ):
        sleeps = Sleeps()
        with SERVERS[provider](scripted([reply, Reply.text(ANSWER)])) as server:
            with pytest.raises(ModelError, match="Retry-After too long"):
                complete(backend(provider, server.url, transport, mode == "stream", sleep=sleeps))
            assert len(server.bodies()) == 1
        assert sleeps.waits == []


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_through_tether_run_a_gateway_reset_is_waited_and_the_answer_accepted(
    tmp_path: Path, provider: str, transport: str
) -> None:
    """``tether run`` with an agent file: a 429 whose only wait is a reset under no limit's name
    waits it (the trace's retry says the wait; before, the 10 ms backoff) and the next answer
    is accepted, exit 0."""
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "0.25"}
    replies = [Reply(status=429, error_body=error_object(provider), headers=headers), Reply.text(ANSWER)]
    with SERVERS[provider](scripted(replies)) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "max_retries": 1,
            "transport": transport,
        }
        code, out, events = run_json(tmp_path, model)
        assert len(server.bodies()) == 2
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    (response,) = [e for e in events if e["kind"] == "model_response"]
    assert response["retries"] == [{"kind": "rate_limited", "attempt": 1, "delay_s": 0.25}], response


# -- pinned: already honest --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "then"),
    [("openai-chat", "anthropic"), ("anthropic", "openai-responses"), ("openai-responses", "openai-chat")],
)
def test_pinned_a_slow_primary_times_out_and_its_fast_fallback_answers(
    tmp_path: Path, first: str, then: str
) -> None:
    """A chain whose first model answers only after 60 s (past its ``timeout_s`` of 3 s) and
    whose fallback answers at once: each try of the first is cut at its timeout (two tries, never
    the server's 60 s), the fallback's tool call runs once and its answer is accepted, exit 0,
    the switch named with the timeout."""
    slow = [Reply.text(ANSWER, delay_s=60)] * 3
    fast = [Reply.calls(("read_order", '{"order_id": "742"}')), Reply.text(ANSWER)]
    with SERVERS[first](scripted(slow)) as a, SERVERS[then](scripted(fast)) as b:
        model = {
            "provider": first,
            "name": "m-1",
            "base_url": a.url,
            "max_retries": 1,
            "timeout_s": 3,
            "fallback": [{"provider": then, "name": "m-2", "base_url": b.url, "timeout_s": 20}],
            "limits": {"deadline_s": 50},
        }
        code, out, _ = run_json(tmp_path, model)
        assert (len(a.bodies()), len(b.bodies())) == (2, 2), (code, out)
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out["calls"]
    (switch,) = out["model_fallbacks"]
    assert (switch["provider"], switch["to_provider"]) == (first, then), switch
    assert "did not complete within 3s (gave up after 2 attempts)" in switch["error"], switch


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pinned_thousands_of_one_character_deltas_are_read_whole(tmp_path: Path, provider: str) -> None:
    """A call whose arguments come in 2,000 one-character deltas and an answer of 20,000
    one-character deltas: the call runs with its arguments and the answer is accepted exactly
    (no figure is asserted; ``bench/`` times such streams)."""
    arguments = json.dumps({"order_id": "7" * 2000})
    text = ("Order 742 is open — awaiting part P-17 ✓ " * 500)[:20_000]
    replies = [
        Reply.calls(("read_order", arguments), chunks=len(arguments)),
        Reply.text(text, chunks=len(text)),
    ]
    code, out, bodies = run_turns(tmp_path, provider, replies, timeout_s=60)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", text, 2), out["message"]
    assert [c["status"] for c in out["calls"]] == ["ok"], out["calls"]
