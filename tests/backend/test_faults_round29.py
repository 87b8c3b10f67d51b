"""Model faults, round twenty-nine: time, retries and the run around a failing model, driven as
the other rounds are (an agent file naming ``model.provider`` and ``tether run`` in process, or
the backends' Python API where the waits are counted) against real servers on 127.0.0.1 speaking
chat completions, the Responses API and the Anthropic Messages API, streamed and whole, over the
SDK transport and plain httpx2. No wall-clock asserts: waits are counted by an injected sleep, and
a deadline bounds what runs.

Fixed here:

- an error reported inside a 2xx answer (an error body, an error event mid-stream) whose answer
  says ``x-should-retry: false`` was asked again until the retries were spent, where the same
  header on a 5xx or 429 ends the call at once (as both official SDKs obey it). Final now, the
  run ``model_error`` naming the header, the server asked once (``_failures.Failures.again``);
- a ``retry-after`` (or ``retry-after-ms``) header sent twice (a proxy that adds its own beside
  the server's; the client joins them, ``1, 3``) was no number: the wait was lost and the
  rate-limited server asked again at once. The longest of its numbers is waited now
  (``_failures.retry_after``);
- text an attempt streamed to ``on_delta`` before it failed (an error event after ``Order``, a
  model of a fallback chain that gave up mid-answer) ran straight into the next attempt's: the
  terminal showed ``Order Order 742 is open``. ``on_delta("discard", why)`` now says the pieces
  before it were no answer, and ``tether run`` marks them so (``_retrying.RetryingBackend._discard``,
  ``_progress.show_text``);
- a fallback chain that falls back to the same model name on another provider (``m-1`` on chat,
  then ``m-1`` on Anthropic): the switch named ``m-1`` twice, and the key fix for a 401 named the
  *last* model's key variable (``$ANTHROPIC_API_KEY`` for the chat model's refused
  ``$OPENAI_API_KEY``). The switch, the trace's ``fallback_from`` and the run's
  ``model_fallbacks`` now name each model's provider, and the fix the failed model's own variable
  (found by its place in the chain, ``_fallback._named``, ``output.model_fallbacks``);
- a call the run's deadline cut after it had retried (429s with their ``retry-after``, 5xx, a
  timeout), or after a chain's models had failed, left no trace of either: the run ended
  ``deadline`` with only ``context_composed`` before it, as if the model had been slow. A
  ``model_error`` event now says what the cut call met (its retries, each with its model; the
  models it left), as one already did for what it was billed (``_loop._count_unsettled``).

Probed, already honest on every protocol, transport and mode (covered by earlier rounds and
pinned here where cheap): a 1 s ``timeout_s`` against headers trickled a byte at a time, and a
stream of keep-alive comments forever (each ``timeout``, asked once with no retries); a stream
held open after its terminal event (accepted at once); ``retry-after`` as garbage, negative, an
HTTP date passed (backoff or no wait), ``retry-after-ms`` beside ``retry-after`` (the ms).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from backend_support import Sleeps
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent

from tether.cli import main
from tether.cli._commands import _progress
from tether.core.messages import UserMessage
from tether.errors import ModelError
from tether.models import AnthropicMessages, ModelRequest, OpenAICompatible, OpenAIResponses, RetryPolicy
from tether.models._fallback import FallbackModel
from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = ("openai-chat", "anthropic", "openai-responses")
BACKENDS: dict[str, Any] = {
    "openai-chat": OpenAICompatible,
    "openai-responses": OpenAIResponses,
    "anthropic": AnthropicMessages,
}
EVERY = [(p, t, s) for p in PROVIDERS for t in ("http", "sdk") for s in (False, True)]
STREAMED = [(p, t) for p in PROVIDERS for t in ("http", "sdk")]
REQUEST = ModelRequest(messages=(UserMessage("Why is 742 open?"),))


def run_json(tmp_path: Path, model: dict[str, Any]) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """``tether run --agent ... --json``: exit code, the JSON summary, every trace event."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "Why is 742 open?", "--agent", str(write_agent(tmp_path, model)), "--json"])
    summary = json.loads(out.getvalue().strip().split("\n")[-1])
    events = [json.loads(line) for line in Path(summary["trace"]).read_text().splitlines()]
    return code, summary, events


def backend(provider: str, url: str, transport: str, stream: bool, **kw: Any) -> Any:
    kw.setdefault("retry", RetryPolicy(max_retries=2, base_delay_s=0.01))
    return BACKENDS[provider]("m-1", base_url=url, transport=transport, stream=stream, timeout_s=10, **kw)


def complete(model: Any) -> Any:
    async def go() -> Any:
        try:
            return await model.complete(REQUEST)
        finally:
            await model.aclose()

    return anyio.run(go)


# -- an error inside a 2xx answer that says not to retry ----------------------------------------------


def error_object(provider: str) -> dict[str, Any]:
    """The protocol's error object for a server that failed (a kind another try may pass)."""
    if provider == "anthropic":
        return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    if provider == "openai-responses":
        return {"type": "error", "code": "server_error", "message": "The server had an error"}
    return {"error": {"type": "server_error", "message": "The server had an error"}}


def after_first_text(provider: str) -> Callable[[list[Any]], list[Any]]:
    """The stream, up to and with its first event that carries text, then the protocol's error
    event (a 200 that fails mid-answer); a whole answer: the error object for the body."""

    def carries_text(item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        if provider == "openai-chat":
            return any((c.get("delta") or {}).get("content") for c in item.get("choices") or ())
        if provider == "anthropic":
            return item.get("type") == "content_block_delta" and bool(item["delta"].get("text"))
        return item.get("type") == "response.output_text.delta"

    def edit(items: list[Any]) -> list[Any]:
        at = next((i for i, item in enumerate(items) if carries_text(item)), None)
        return [error_object(provider)] if at is None else [*items[: at + 1], error_object(provider)]

    return edit


@pytest.mark.parametrize(("provider", "transport", "stream"), EVERY)
def test_an_error_in_a_2xx_answer_that_says_not_to_retry_is_final(
    tmp_path: Path, provider: str, transport: str, stream: bool
) -> None:
    """An error body (whole) or an error event after the first text (streamed), in a 200 whose
    headers say ``x-should-retry: false``: the run ends ``model_error`` at once, non-zero, naming
    the header, the server asked once (before: asked again until the retries were spent, as if
    it had said nothing). Without the header, the same error is retried and the next answer
    accepted."""
    model = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    model.update(max_retries=2, timeout_s=10)
    failing = Reply.text(ANSWER, edit=after_first_text(provider), headers={"x-should-retry": "false"})
    with SERVERS[provider](scripted([failing, Reply.text(ANSWER)])) as server:
        code, out, events = run_json(tmp_path, {**model, "base_url": server.url})
        assert (code != 0, out["stop_reason"], len(server.bodies())) == (True, "model_error", 1), out
        assert "x-should-retry: false" in out["message"], out["message"]
    errors = [e for e in events if e["kind"] == "model_error"]
    assert len(errors) == 1 and "x-should-retry: false" in errors[0]["error"], errors
    plain = Reply.text(ANSWER, edit=after_first_text(provider))
    with SERVERS[provider](scripted([plain, Reply.text(ANSWER)])) as server:
        code, out, _ = run_json(tmp_path, {**model, "base_url": server.url})
        assert (code, out["stop_reason"], out["answer"], len(server.bodies())) == (
            0,
            "accepted",
            ANSWER,
            2,
        ), out


# -- a retry-after header sent twice ---------------------------------------------------------------


@pytest.mark.parametrize(("provider", "transport", "stream"), EVERY)
def test_a_retry_after_sent_twice_waits_the_longest(provider: str, transport: str, stream: bool) -> None:
    """A 429 whose ``retry-after`` comes twice (``1`` from the server, ``3`` from a proxy; the
    client joins them ``1, 3``), then a 503 whose ``retry-after-ms`` does the same: the call waits
    3 s, then 0.9 s, and the answer after them is accepted (before: neither wait was read, each
    retry was a backoff of milliseconds against a server that asked for seconds). A single value,
    garbage, a negative one and an HTTP date passed keep their meaning."""
    twice = {"retry-after": "1", "Retry-After": "3"}  # two header lines: the client joins them
    twice_ms = {"retry-after-ms": "500", "Retry-After-Ms": "900"}
    replies = [
        Reply(status=429, error_body=error_object(provider), headers=twice),
        Reply(status=503, error_body=error_object(provider), headers=twice_ms),
        Reply(status=503, error_body=error_object(provider), headers={"retry-after": "2"}),
        Reply(status=503, error_body=error_object(provider), headers={"retry-after": "soon"}),
        Reply(status=503, error_body=error_object(provider), headers={"retry-after": "-4"}),
        Reply(
            status=503,
            error_body=error_object(provider),
            headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
        ),
        Reply.text(ANSWER),
    ]
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=6, base_delay_s=0.01)
    with SERVERS[provider](scripted(replies)) as server:
        response = complete(backend(provider, server.url, transport, stream, retry=policy, sleep=sleeps))
        assert len(server.bodies()) == 7
    assert response.message.content == ANSWER
    assert sleeps.waits[:3] == [3.0, 0.9, 2.0], sleeps.waits
    assert all(w < 0.5 for w in sleeps.waits[3:5]) and sleeps.waits[5] == 0.0, sleeps.waits  # backoff


# -- text a failed attempt streamed --------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "transport"), STREAMED)
def test_text_a_failed_attempt_streamed_is_discarded_before_the_next(provider: str, transport: str) -> None:
    """A stream that fails after its first piece of text, then a good one: ``on_delta`` gets
    the lost piece, then ``discard`` naming the failure, then the answer whole, so what follows
    the last discard is the answer (before: the lost piece ran into the answer, ``Order Order
    742 is open``). The answer and its usage are the second attempt's, the first's billing
    counted once, beside it."""
    seen: list[tuple[str, str]] = []
    replies = [Reply.text(ANSWER, edit=after_first_text(provider)), Reply.text(ANSWER)]
    with SERVERS[provider](scripted(replies)) as server:
        model = backend(provider, server.url, transport, True, on_delta=lambda k, p: seen.append((k, p)))
        response = complete(model)
        assert len(server.bodies()) == 2
    kinds = [k for k, _ in seen]
    assert kinds.count("discard") == 1, seen
    at = kinds.index("discard")
    lost = "".join(p for k, p in seen[:at] if k == "text")
    assert lost and ANSWER.startswith(lost) and lost != ANSWER, seen
    assert "asked again" in seen[at][1], seen[at]
    assert "".join(p for k, p in seen[at + 1 :] if k == "text") == ANSWER, seen
    assert response.message.content == ANSWER and response.meta["retries"][0]["attempt"] == 1
    billed = response.meta.get("failed_attempts_billed")
    failed = (billed or {}).get("prompt_tokens", 0)
    assert response.usage.prompt_tokens == 100 + failed, (response.usage, billed)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_fallback_model_that_failed_mid_answer_is_discarded_before_the_next_model(provider: str) -> None:
    """A chain whose first model (``provider``, streamed) fails mid-answer on every attempt and
    whose second (chat) answers: the first model's pieces are discarded once per attempt, the
    last saying the call failed, before the second model's answer."""
    seen: list[tuple[str, str]] = []
    failing = Reply.text(ANSWER, edit=after_first_text(provider))
    with (
        SERVERS[provider](scripted([failing, failing])) as first,
        SERVERS["openai-chat"](scripted([Reply.text(ANSWER)])) as second,
    ):
        show = lambda k, p: seen.append((k, p))  # noqa: E731
        policy = RetryPolicy(max_retries=1, base_delay_s=0.01)
        chain = FallbackModel(
            [
                backend(provider, first.url, "http", True, on_delta=show, retry=policy),
                backend("openai-chat", second.url, "sdk", True, on_delta=show, retry=policy),
            ]
        )
        response = complete(chain)
    discards = [p for k, p in seen if k == "discard"]
    assert len(discards) == 2 and "asked again" in discards[0] and "failed" in discards[1], seen
    last = max(i for i, (k, _) in enumerate(seen) if k == "discard")
    assert "".join(p for k, p in seen[last + 1 :] if k == "text") == ANSWER, seen
    assert response.message.content == ANSWER and response.meta["fallback_from"][0]["provider"] == provider


def test_tether_run_marks_discarded_text_on_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """``tether run``'s stream on stderr (``show_text``): text, then a discard, says the text
    above is no answer before the next attempt's; a discard with no text shown says nothing."""
    _progress._SHOWN[0] = False
    _progress.show_text("discard", "server_error: asked again")  # nothing shown: nothing to mark
    for kind, piece in [("text", "Order "), ("discard", "server_error: asked again"), ("text", ANSWER)]:
        _progress.show_text(kind, piece)
    err = capsys.readouterr().err
    assert err == f"Order \n[the text above is no answer: server_error: asked again]\n{ANSWER}", err


# -- a fallback to the same model name on another provider ------------------------------------------


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    yield


BAD_KEY = Reply(status=401, error_body={"error": {"type": "invalid_api_key", "message": "bad key"}})
KEY_OF = {
    "openai-chat": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


@pytest.mark.usefixtures("no_keys")
@pytest.mark.parametrize(
    ("first", "then"),
    [("openai-chat", "anthropic"), ("anthropic", "openai-responses"), ("openai-responses", "anthropic")],
)
def test_a_fallback_to_the_same_name_on_another_provider_names_each(
    tmp_path: Path, first: str, then: str
) -> None:
    """``m-1`` on ``first`` refuses its key (401) and the chain moves to ``m-1`` on ``then``,
    which answers: the run is accepted, and its ``model_fallbacks``, the trace's
    ``fallback_from`` and the warning line name each model's provider, the fix the failed
    model's own key variable (before: both were ``m-1``, and the fix named the last model's
    variable, ``$ANTHROPIC_API_KEY`` for a chat model's refused key)."""
    each = {"name": "m-1", "max_retries": 0, "timeout_s": 10}
    with (
        SERVERS[first](scripted([BAD_KEY])) as a,
        SERVERS[then](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as b,
    ):
        fallback = [{"provider": then, "base_url": b.url, **each}]
        code, out, events = run_json(
            tmp_path, {"provider": first, "base_url": a.url, "fallback": fallback, **each}
        )
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    (switch,) = out["model_fallbacks"]
    assert (switch["provider"], switch["to_provider"], switch["model"], switch["to"]) == (
        first,
        then,
        "m-1",
        "m-1",
    )
    assert f"${KEY_OF[first]} is not set" in switch["fix"], switch
    answered = [e for e in events if e["kind"] == "model_response"]
    assert answered[0]["fallback_from"][0]["provider"] == first and answered[0]["provider"] == then, answered
    out_text = io.StringIO()
    with (
        contextlib.redirect_stdout(out_text),
        contextlib.redirect_stderr(io.StringIO()),
        SERVERS[first](scripted([BAD_KEY])) as a,
        SERVERS[then](scripted([Reply.text(ANSWER)])) as b,
    ):
        fallback = [{"provider": then, "base_url": b.url, **each}]
        agent = write_agent(tmp_path, {"provider": first, "base_url": a.url, "fallback": fallback, **each})
        assert main(["run", "Why is 742 open?", "--agent", str(agent)]) == 0
    printed = out_text.getvalue()
    assert f"model m-1 ({first}) failed, the run moved to m-1 ({then})" in printed, printed
    assert f"fix: ${KEY_OF[first]} is not set" in printed, printed


# -- a call the deadline cut after retries ---------------------------------------------------------------


def stalled(items: list[Any]) -> list[Any]:
    """No answer: the headers, then the server holds the connection (past the run's deadline)."""
    return [Pause(30)]


def rate_limited(provider: str) -> Reply:
    return Reply(status=429, error_body=error_object(provider), headers={"retry-after": "0.2"})


@pytest.mark.parametrize(("provider", "transport", "stream"), EVERY)
def test_a_call_the_deadline_cuts_after_retries_traces_them(
    tmp_path: Path, provider: str, transport: str, stream: bool
) -> None:
    """Two 429s (their ``retry-after`` waited), then an answer that never comes, under a 2 s
    deadline: the run ends ``deadline``, non-zero, and its trace has a ``model_error`` naming
    the two retries, each with its kind, wait and model (before: nothing between
    ``context_composed`` and the stop said the server had refused twice)."""
    model = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    model.update(max_retries=4, timeout_s=30, limits={"deadline_s": 2})
    replies = [rate_limited(provider), rate_limited(provider), Reply.text(ANSWER, edit=stalled)]
    with SERVERS[provider](scripted(replies)) as server:
        code, out, events = run_json(tmp_path, {**model, "base_url": server.url})
        assert len(server.bodies()) == 3
    assert (code != 0, out["stop_reason"]) == (True, "deadline"), out
    (error,) = [e for e in events if e["kind"] == "model_error"]
    assert "2 retries (rate_limited)" in error["error"], error
    assert [(r["kind"], r["delay_s"], r["model"]) for r in error["retries"]] == [
        ("rate_limited", 0.2, "m-1")
    ] * 2


def test_a_chain_the_deadline_cuts_traces_the_models_it_left(tmp_path: Path) -> None:
    """A chain whose first model (chat) gives up on a 503 it was told to wait a day for, and
    whose second (Anthropic, streamed, SDK) is rate limited once and then never answers, under
    a 2 s deadline: the run ends ``deadline``, its ``model_error`` naming the model it left and
    the second model's retry."""
    day = Reply(status=503, error_body=error_object("openai-chat"), headers={"retry-after": "86400"})
    second = [rate_limited("anthropic"), Reply.text(ANSWER, edit=stalled)]
    each = {"max_retries": 3, "timeout_s": 30}
    with SERVERS["openai-chat"](scripted([day])) as a, SERVERS["anthropic"](scripted(second)) as b:
        other = {
            "provider": "anthropic",
            "name": "m-b",
            "base_url": b.url,
            "streaming": True,
            "transport": "sdk",
        }
        model = {
            "provider": "openai-chat",
            "name": "m-a",
            "base_url": a.url,
            **each,
            "limits": {"deadline_s": 2},
        }
        code, out, events = run_json(tmp_path, {**model, "fallback": [{**other, **each}]})
    assert (code != 0, out["stop_reason"]) == (True, "deadline"), out
    (error,) = [e for e in events if e["kind"] == "model_error"]
    assert [(f["model"], f["provider"]) for f in error["fallback_from"]] == [("m-a", "openai-chat")], error
    assert "Retry-After too long" in error["fallback_from"][0]["error"], error
    assert [(r["kind"], r["model"]) for r in error["retries"]] == [("rate_limited", "m-b")], error


# -- held: time bounds (probed honest; pinned) -------------------------------------------------------


def keep_alive_forever(items: list[Any]) -> list[Any]:
    return [*items[:1], *([b": keep-alive\n\n", Pause(0.2)] * 300)]


@pytest.mark.parametrize(("provider", "transport"), STREAMED)
def test_a_1s_timeout_bounds_trickled_headers_and_keep_alive_forever(provider: str, transport: str) -> None:
    """A 1 s ``timeout_s`` against an answer trickled a byte every 0.3 s (headers included), and
    against a stream of keep-alive comments that never ends: each attempt ends ``timeout``, the
    call a ``ModelError`` naming it, the server asked once with no retries."""
    for reply in (Reply.text(ANSWER, trickle_s=0.3), Reply.text(ANSWER, edit=keep_alive_forever)):
        with SERVERS[provider](scripted([reply])) as server:
            model = BACKENDS[provider](
                "m-1",
                base_url=server.url,
                transport=transport,
                stream=True,
                timeout_s=1,
                retry=RetryPolicy(max_retries=0),
            )
            with pytest.raises(ModelError, match="timeout: the call did not complete within 1s"):
                complete(model)
            assert len(server.bodies()) == 1
