"""Model faults, round thirty-two: whole answers and retries, driven as the other rounds are (an
agent file naming ``model.provider``, ``tether run`` in process, over the SDK transport and plain
httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API and the
Anthropic Messages API, or the backends' Python API where the waits are counted (an injected
sleep, no wall-clock asserts).

Fixed here:

- a 429 that says when its rate limit resets only in the rate-limit headers (Anthropic's
  ``anthropic-ratelimit-<limit>-remaining`` / ``-reset``, an RFC 3339 time; OpenAI's
  ``x-ratelimit-remaining-<limit>`` / ``x-ratelimit-reset-<limit>``, a duration ``6m0s``), no
  ``retry-after``: it was asked again after a backoff of milliseconds, each retry spent against
  a limit that had said it was spent for 20 s more. The wait is until the spent limits' latest
  reset now (the soonest, when none says which is spent), as long as a ``retry-after``
  (``_failures.rate_reset``); one past ``max_retry_after_s`` ends the call at once;
- a fallback chain whose every model spent its retries ended ``model_error`` with a message
  that named each model twice and no provider (``m-1: m-1: HTTP 503 …; m-1: m-1: HTTP 529 …``:
  the same name on two providers, which failed how?) and a trace whose ``model_error`` held
  only the retries. The message names each model once after its provider now
  (``openai-chat model m-1: …``), and the event lists the models and what each met
  (``fallback_from``, as a call the deadline cut already did: ``ModelError.fallback_from``).

Probed, all already honest on both transports; pinned here so they stay so: a whole answer
followed by a second JSON document, or cut mid-JSON with its ``Content-Length`` right (each
unusable, retried once, then ``model_error``); a UTF-16 body, labelled ``charset=utf-16`` or not
(accepted); a 200 whose body is the protocol's error object (retried, ``model_error`` quoting
it); a whole Responses answer ``failed`` (retried), ``cancelled``, ``queued`` or ``in_progress``
(final); an Anthropic ``pause_turn`` with server tool blocks (final, naming it); a
``stop_sequence`` stop and a ``usage`` without its input count (accepted); 529 and 503 with
``retry-after-ms`` (the ms waited), 408, 409 and 425 (retried with backoff).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backend_support import Sleeps
from test_faults_heldout import ANSWER, SERVERS, Case, case_params, good, only
from test_faults_round15 import walk_dicts
from test_faults_round28 import ends_as_its_case_says
from test_faults_round29 import backend, complete, error_object, run_json
from test_faults_round31 import on_wire, twice

from tether.errors import ModelError
from tether.models import RetryPolicy
from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

C, A, R = ("openai-chat",), ("anthropic",), ("openai-responses",)
STREAM, WHOLE = ("stream",), ("whole",)
Edit = Callable[[str, bool, list[Any]], list[Any]]


# -- edits ----------------------------------------------------------------------------------------


def utf16(p: str, s: bool, items: list[Any]) -> list[Any]:
    """The whole answer encoded as UTF-16 (with its byte-order mark)."""
    return on_wire(lambda b: b.decode("utf-8").encode("utf-16"))(p, s, items)


def error_in_200(p: str, s: bool, items: list[Any]) -> list[Any]:
    """A 200 whose body is the protocol's error object for a server that failed."""
    if p == "anthropic":
        return [{"type": "error", "error": {"type": "api_error", "message": "Internal boom"}}]
    return [{"error": {"message": "Internal boom", "type": "server_error", "code": None}}]


def status(value: str) -> Edit:
    """A whole Responses answer whose ``status`` is ``value``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        items[-1]["status"] = value
        return items

    return edit


def pause_with_server_tool(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a turn paused (``pause_turn``) after a server tool's use and its result."""
    items[-1]["content"] = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "742"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    ]
    items[-1]["stop_reason"] = "pause_turn"
    return items


def stop_sequence(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Anthropic: the turn ended by a stop sequence, not ``end_turn``."""

    def fix(d: dict[str, Any]) -> None:
        if d.get("stop_reason") == "end_turn":
            d.update(stop_reason="stop_sequence", stop_sequence="###")

    return walk_dicts(items, fix)


def no_input_tokens(p: str, s: bool, items: list[Any]) -> list[Any]:
    """A ``usage`` without its prompt (input) count."""

    def fix(d: dict[str, Any]) -> None:
        for k in ("prompt_tokens", "input_tokens"):
            d.pop(k, None)

    return walk_dicts(items, fix)


# -- the cases ------------------------------------------------------------------------------------

UTF16 = {"content-type": "application/json; charset=utf-16"}
CASES = [
    # -- pinned: unusable or failed, retried once, then model_error -------------------------------
    Case("pinned_a_second_json_document_after_the_answer", twice(on_wire(lambda b: b + b'{"id": "x"}')),
         False, ("gave up",), modes=WHOLE),
    Case("pinned_cut_mid_json_with_its_length_right", twice(on_wire(lambda b: b[: len(b) // 2])), False,
         ("gave up",), modes=WHOLE),
    Case("pinned_an_error_object_in_a_200", twice(error_in_200), False, ("Internal boom", "gave up"),
         modes=WHOLE),
    Case("pinned_a_whole_response_failed", only(R, twice(status("failed"))), False, ("failed", "gave up"),
         modes=WHOLE),
    # -- pinned: final at once, model_error -------------------------------------------------------
    Case("pinned_a_whole_response_cancelled", only(R, twice(status("cancelled"))), False, ("cancelled",),
         modes=WHOLE),
    Case("pinned_a_whole_response_queued", only(R, twice(status("queued"))), False, ("queued",),
         modes=WHOLE),
    Case("pinned_a_whole_response_in_progress", only(R, twice(status("in_progress"))), False,
         ("in_progress",), modes=WHOLE),
    Case("pinned_pause_turn_after_server_tool_blocks", only(A, twice(pause_with_server_tool)), False,
         ("pause_turn",), modes=WHOLE),
    # -- pinned: accepted with the answer ---------------------------------------------------------
    Case("pinned_a_utf16_body_labelled_so", good(edit=utf16, headers=UTF16), True, modes=WHOLE),
    Case("pinned_a_utf16_body_unlabelled", good(edit=utf16), True, modes=WHOLE),
    Case("pinned_a_stop_sequence_stop", only(A, good(edit=stop_sequence)), True),
    Case("pinned_usage_without_its_input_count", good(edit=no_input_tokens), True),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round32_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    ends_as_its_case_says(tmp_path, case, provider, mode, transport)


# -- retries, the backends called directly -----------------------------------------------------------

EVERY = [
    pytest.param(p, t, s, id=f"{p}-{t}-{'stream' if s else 'whole'}")
    for p in sorted(SERVERS)
    for t in ("http", "sdk")
    for s in (False, True)
]


def at(seconds: float) -> str:
    """An RFC 3339 time ``seconds`` from now (as Anthropic's rate-limit resets are written)."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(("provider", "transport", "stream"), EVERY)
def test_a_429_waits_until_its_spent_limit_resets(provider: str, transport: str, stream: bool) -> None:
    """A 529 and a 503 with ``retry-after-ms`` (the ms waited), 408, 409 and 425 (backoff), then
    429s that say when their limits reset only in rate-limit headers: Anthropic's spent tokens
    limit resets in 20 s (its requests limit, not spent, in 50 s), OpenAI's spent requests limit
    in ``6m0s`` … The call waits until the spent limit resets (before: a backoff of
    milliseconds), the soonest reset where none says it is spent; the answer after is accepted."""
    e = error_object(provider)
    anthropic = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": at(20),
        "anthropic-ratelimit-requests-remaining": "12",
        "anthropic-ratelimit-requests-reset": at(50),
    }
    openai = {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "0m30s",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "20ms",
    }
    replies = [
        Reply(status=529, error_body=e, headers={"retry-after-ms": "1500"}),
        Reply(status=503, error_body=e, headers={"retry-after-ms": "700"}),
        Reply(status=408, body=b"timeout"),
        Reply(status=409, body=b"conflict"),
        Reply(status=425, body=b"too early"),
        Reply(status=429, error_body=e, headers=anthropic),
        Reply(status=429, error_body=e, headers=openai),
        Reply(status=429, error_body=e, headers={"anthropic-ratelimit-requests-reset": at(5),
                                                 "anthropic-ratelimit-tokens-reset": at(40)}),
        Reply(status=429, error_body=e, headers={**openai, "retry-after": "2"}),  # retry-after first
        Reply.text(ANSWER),
    ]  # fmt: skip
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=9, base_delay_s=0.01)
    with SERVERS[provider](scripted(replies)) as server:
        response = complete(backend(provider, server.url, transport, stream, retry=policy, sleep=sleeps))
        assert len(server.bodies()) == 10
    assert response.message.content == ANSWER
    w = sleeps.waits
    assert w[:2] == [1.5, 0.7] and all(x < 0.5 for x in w[2:5]), w
    assert 10 < w[5] <= 20 and w[6] == 30.0 and 0 < w[7] <= 5 and w[8] == 2.0, w


@pytest.mark.parametrize(("provider", "transport", "stream"), EVERY[::3])
def test_a_429_whose_limit_resets_past_the_longest_wait_ends_at_once(
    provider: str, transport: str, stream: bool
) -> None:
    """A 429 whose spent limit resets in two hours (past ``max_retry_after_s``) ends the call at
    once, as a ``retry-after`` as long does; one whose limits are not spent is backed off."""
    far = {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": at(7200)}
    told = {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "6m0s"}
    e = error_object(provider)
    replies = [Reply(status=429, error_body=e, headers=told), Reply(status=429, error_body=e, headers=far)]
    sleeps = Sleeps()
    with SERVERS[provider](scripted(replies)) as server:
        with pytest.raises(ModelError, match="Retry-After too long"):
            complete(backend(provider, server.url, transport, stream, sleep=sleeps))
        assert len(server.bodies()) == 2
    assert len(sleeps.waits) == 1 and sleeps.waits[0] < 0.5, sleeps.waits


# -- retries spent along a fallback chain ---------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "then", "transport"),
    [("openai-chat", "anthropic", "sdk"), ("anthropic", "openai-responses", "http"),
     ("openai-responses", "openai-chat", "sdk")],
)  # fmt: skip
def test_a_chain_whose_models_each_spend_their_retries_ends_model_error(
    tmp_path: Path, first: str, then: str, transport: str
) -> None:
    """Each model of a chain answers 503 (then 529) until its retries are spent: the run ends
    ``model_error``, non-zero, once each model was asked ``max_retries + 1`` times, no answer
    accepted. Its message names each model once, after its provider (before: ``m-1: m-1: …``,
    which provider unsaid), and its trace's ``model_error`` lists both models and what each met
    (before: only the retries, each naming ``m-1``)."""
    each = {"name": "m-1", "max_retries": 1, "timeout_s": 10, "transport": transport}
    a_replies = [Reply(status=503, error_body=error_object(first))] * 2
    b_replies = [Reply(status=529, error_body=error_object(then), headers={"retry-after-ms": "10"})] * 2
    with SERVERS[first](scripted(a_replies)) as a, SERVERS[then](scripted(b_replies)) as b:
        fallback = [{"provider": then, "base_url": b.url, **each}]
        model = {"provider": first, "base_url": a.url, "fallback": fallback, **each}
        code, out, events = run_json(tmp_path, model)
        assert (len(a.bodies()), len(b.bodies())) == (2, 2)
    assert (code != 0, out["stop_reason"], out["answer"]) == (True, "model_error", None), out
    message = out["message"]
    one, two = message.split("every model failed: ")[1].split("; ")
    assert one.startswith(f"{first} model m-1: ") and "HTTP 503" in one, message
    assert two.startswith(f"{then} model m-1: ") and "HTTP 529" in two and "m-1: m-1" not in message, message
    assert message.count("gave up after 2 attempts") == 2, message
    (error,) = [e for e in events if e["kind"] == "model_error"]
    said = [(f["model"], f["provider"], "HTTP 503" in f["error"]) for f in error["fallback_from"]]
    assert said == [("m-1", first, True), ("m-1", then, False)], error
    assert "HTTP 529" in error["fallback_from"][1]["error"] and len(error["retries"]) == 2, error
