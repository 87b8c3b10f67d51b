"""Model faults, round thirty-five: multi-turn and stateful faults, driven as the other rounds are
(an agent file naming ``model.provider``, ``tether run`` in process, streamed and whole, over the
SDK transport and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the
Responses API and the Anthropic Messages API: servers that answer the first turn well and fail a
later one.

Fixed here:

- the last turn a budget grants (tools off, its output capped at ``final_turn_max_tokens``) was
  read without asking how it ended: one cut at its token cap (``length``, ``max_tokens``,
  ``max_output_tokens``) or refused (``content_filter``, ``refusal``) stood as the run's answer
  and the stop said only ``budget: LLM-call budget of 1 used``, the cut or refused text passed
  off as a whole answer (``runners._loop._graceful_answer``). The run still stops ``budget``
  (exit 4) with the text, as a stopped turn keeps its text, and its detail now says how the last
  turn ended (``finish_problem``, the owner of that judgement for every turn).

Probed, all already honest; pinned here so they stay so (``PINNED``, and the tests after it):

- a second turn that fails after a first that reasoned (an Anthropic thinking block with its
  signature, a Responses reasoning item with its encrypted content, both sent back): a 400 that
  says the item is unknown or the signature invalid is final (asked once, the first turn's call
  run, ``model_error``, never a loop); a 500 twice gives up; a second stream that stalls after
  its finish (the usage chunk, ``message_delta`` usage or ``response.completed`` never coming) is
  cut at the call's ``timeout_s``; a second turn cut at the token limit inside its second
  parallel call's arguments runs neither call (``truncated``);
- a call id the server gives again on the next turn (given a fresh id; each call its own result);
- the same call forever, with its arguments spaced differently, or with its text changing; two
  or three calls in turn (``repetition``, exit 4); twenty identical calls in one turn (none run);
- parallel calls of which one has broken arguments (refused, the others run, exit 2); a turn with
  a call and text that says ``stop`` (the call runs, the next turn's answer stands);
- prompt-cache counts far past the prompt (``cache_read_input_tokens``, ``cache_creation`` 10**12):
  counted as said, the token and cost budgets stop the run; usage left out of every answer:
  estimated, never zero;
- a fallback chain whose first model, after a turn of calls, is cut mid-stream in its second
  turn after text and half a call: the next model's request holds neither, nor the first
  protocol's reasoning; its answer is accepted.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent

from tether.cli import main
from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = sorted(SERVERS)
OTHER = ("read_order", '{"order_id": "743"}')
CUT_AT = {"anthropic": "max_tokens", "openai-chat": "length", "openai-responses": "max_output_tokens"}
REFUSED_AS = {"anthropic": "refusal", "openai-chat": "content_filter", "openai-responses": "content_filter"}
Run = tuple[int, dict[str, Any], list[dict[str, Any]]]


def run_turns(
    tmp_path: Path,
    provider: str,
    replies: list[Reply],
    *,
    mode: str = "stream",
    transport: str = "http",
    timeout_s: float = 3.0,
    limits: dict[str, Any] | None = None,
    prices: dict[str, Any] | None = None,
) -> Run:
    """``tether run --agent`` against a server answering ``replies`` in turn: exit code, JSON
    summary, the request bodies."""
    with SERVERS[provider](scripted(replies)) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "timeout_s": timeout_s,
            "max_retries": 1,
            "streaming": mode == "stream",
            "transport": transport,
            "limits": {"deadline_s": 30, **(limits or {})},
            **({"prices": prices} if prices else {}),
        }
        path = write_agent(tmp_path, model)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        return code, json.loads(out.getvalue().strip().split("\n")[-1]), server.bodies()


# -- fixed: the budget's last turn, cut or refused, is said ------------------------------------

ONE_CALL = {"llm_calls": 1, "llm_calls_hard": 3}  # the budget trips after the first turn


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("end", "said"),
    [
        (CUT_AT, "the final turn: the answer was cut at the output-token limit"),
        (REFUSED_AS, "the final turn: the provider refused or filtered the answer"),
    ],
    ids=["cut", "refused"],
)
def test_a_budget_final_turn_that_ended_abnormally_says_so(
    tmp_path: Path, provider: str, mode: str, transport: str, end: dict[str, str], said: str
) -> None:
    """The budget trips after the call; the last turn, tools off, ends cut or refused: the run
    stops ``budget`` (exit 4) with its text, its detail naming how the last turn ended and what
    the provider said (before: ``budget: LLM-call budget of 1 used``, as if the text were whole)."""
    text = "Order 742 is open — awaiting pa"
    last = Reply.text(text, finish_reason=end[provider])
    how = {"mode": mode, "transport": transport, "limits": ONE_CALL}
    code, out, bodies = run_turns(tmp_path, provider, [Reply.calls(ORDER), last], **how)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (4, "budget", text, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
    assert out["message"].startswith("budget: LLM-call budget of 1 used; "), out["message"]
    assert said in out["message"] and repr(end[provider]) in out["message"], out["message"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_budget_final_turn_that_ended_normally_is_unremarked(tmp_path: Path, provider: str) -> None:
    replies = [Reply.calls(ORDER), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, provider, replies, limits=ONE_CALL)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (4, "budget", ANSWER, 2), out
    assert out["message"] == "budget: LLM-call budget of 1 used", out["message"]


# -- pinned: a later turn fails -----------------------------------------------------------------


def stall_after_finish(provider: str) -> Callable[[list[Any]], list[Any]]:
    """A stream that says its finish, then stalls before what should follow (chat: the usage
    chunk and ``[DONE]``; Anthropic: ``message_delta`` without usage, then no ``message_stop``;
    Responses: ``response.completed`` never sent)."""

    def edit(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                finished = any(c.get("finish_reason") for c in item.get("choices") or ())
                if provider == "openai-chat" and finished:
                    return [*out, item, Pause(5)]
                if provider == "anthropic" and item.get("type") == "message_delta":
                    item.pop("usage", None)
                    return [*out, item, Pause(5)]
                if provider == "openai-responses" and item.get("type") == "response.completed":
                    return [*out, Pause(5)]
            out.append(item)
        return out

    return edit


def stalled(provider: str) -> Reply:
    return Reply.text(ANSWER, edit=stall_after_finish(provider))


LATER: list[tuple[str, Callable[[str, bool], list[Reply] | None], tuple[int, str], tuple[str, ...]]] = [
    ("400_item_not_found_after_reasoning",
     lambda p, s: [Reply(tool_calls=(ORDER,), reasoning="checking 742"),
                   Reply.error(400, "Item with id 'rs_1' not found."), Reply.text(ANSWER)],
     (2, "model_error"), ("HTTP 400", "not found")),
    ("400_invalid_signature_after_thinking",
     lambda p, s: [Reply(tool_calls=(ORDER,), reasoning="checking 742"),
                   Reply.error(400, "messages.1.content.0: Invalid `signature` in `thinking` block"),
                   Reply.text(ANSWER)],
     (2, "model_error"), ("HTTP 400", "signature")),
    ("500_twice", lambda p, s: [Reply.calls(ORDER), Reply.error(500, "boom"), Reply.error(500, "boom")],
     (3, "model_error"), ("HTTP 500", "gave up")),
    ("stall_after_the_finish",
     lambda p, s: None if not s else [Reply.calls(ORDER), *[stalled(p)] * 2],
     (3, "model_error"), ("did not complete within 1s", "gave up")),
    ("cut_inside_the_second_parallel_call",
     lambda p, s: None if p == "anthropic" and not s else [
         Reply.calls(ORDER), Reply.calls(OTHER, ("read_order", '{"order_id": "7'), finish_reason=CUT_AT[p])],
     (2, "truncated"), ("cut at the output-token limit", "2 tool call(s) were not run")),
]  # fmt: skip


@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("name", "make", "end", "said"), LATER, ids=[c[0] for c in LATER])
def test_a_later_turn_that_fails_ends_the_run_honestly(
    tmp_path: Path,
    name: str,
    make: Any,
    end: tuple[int, str],
    said: tuple[str, ...],
    provider: str,
    mode: str,
) -> None:
    """The first turn's call runs; the failing turn is asked once (final) or twice (gave up),
    never looped on; no answer, nothing of the failing turn run, exit non-zero."""
    replies = make(provider, mode == "stream")
    if replies is None:
        pytest.skip("the fake server cannot send this whole")
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode, timeout_s=1.0)
    assert (code != 0, len(bodies), out["stop_reason"], out["answer"]) == (True, *end, None), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
    for piece in said:
        assert piece in out["message"], out["message"]
    if "reasoning" in name or "thinking" in name:  # the reasoning went back, as each API requires
        sent = json.dumps(bodies[1])
        assert provider == "openai-chat" or "checking 742" in sent or "enc:" in sent, sent


# -- pinned: state across turns, repetition, parallel calls ---------------------------------------


def same_id(value: str) -> Callable[[list[Any]], list[Any]]:
    """Every call's id (Responses: ``call_id``) set to ``value``."""

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            key = "call_id" if v.get("type") == "function_call" else "id"
            if v.get("type") in ("tool_use", "function_call") or ("function" in v and "id" in v):
                v[key] = value
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    return lambda items: (walk(items), items)[1]


@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_call_id_given_again_on_the_next_turn_gets_its_own_result(
    tmp_path: Path, provider: str, mode: str
) -> None:
    replies = [Reply.calls(ORDER, edit=same_id("call_A")), Reply.calls(OTHER, edit=same_id("call_A")),
               Reply.text(ANSWER)]  # fmt: skip
    code, out, bodies = run_turns(tmp_path, provider, replies, mode=mode)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 3), out
    ids = [c["call_id"] for c in out["calls"]]
    assert [c["status"] for c in out["calls"]] == ["ok", "ok"] and len(set(ids)) == 2, out
    last = json.dumps(bodies[2])
    assert last.count('\\"order_id\\": \\"743\\", \\"status\\"') == 1 and ids[1] in last, last


SPACED = ['{"order_id": "742"}', '{"order_id":"742"}', '{ "order_id" : "742" }', '{"order_id":  "742"}\n']
LOOPS: list[tuple[str, list[Reply], int, str]] = [
    ("same_call_forever", [Reply.calls(ORDER)] * 30, 3, "cycle of 1 turn(s) repeated 3 times"),
    ("same_call_spaced_differently", [Reply.calls(("read_order", SPACED[i % 4])) for i in range(30)], 3,
     "cycle of 1 turn(s) repeated 3 times"),
    ("same_call_its_text_changing", [Reply(content=f"Again {i}", tool_calls=(ORDER,)) for i in range(30)], 3,
     "cycle of 1 turn(s) repeated 3 times"),
    ("two_calls_in_turn", [Reply.calls(ORDER), Reply.calls(OTHER)] * 15, 6,
     "cycle of 2 turn(s) repeated 3 times"),
    ("three_calls_in_turn", [Reply.calls(("read_order", f'{{"order_id": "{i % 3}"}}')) for i in range(30)], 9,
     "cycle of 3 turn(s) repeated 3 times"),
    ("twenty_identical_calls_in_one_turn", [Reply.calls(*[ORDER] * 20), Reply.text(ANSWER)], 1,
     "identical call asked 20 times"),
]  # fmt: skip


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("name", "replies", "asked", "said"), LOOPS, ids=[c[0] for c in LOOPS])
def test_a_model_that_loops_is_stopped(
    tmp_path: Path, name: str, replies: list[Reply], asked: int, said: str, provider: str
) -> None:
    code, out, bodies = run_turns(tmp_path, provider, replies)
    assert (code, out["stop_reason"], len(bodies)) == (4, "repetition", asked), out
    assert said in out["message"] and out["answer"].startswith("Stopped before a verified answer"), out
    assert len(out["calls"]) == (asked if asked > 1 else 0), out


@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_parallel_calls_one_broken_the_others_run_and_a_call_with_text_saying_stop_runs(
    tmp_path: Path, provider: str, mode: str
) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "both").mkdir()
    if not (provider == "anthropic" and mode == "whole"):  # an Anthropic whole input is an object
        broken = Reply.calls(ORDER, ("read_order", '{"order_id": '), OTHER)
        code, out, bodies = run_turns(tmp_path / "broken", provider, [broken, Reply.text(ANSWER)], mode=mode)
        assert (code, out["stop_reason"], out["answer"], len(bodies)) == (2, "accepted", ANSWER, 2), out
        assert [c["status"] for c in out["calls"]] == ["rejected", "ok", "ok"], out
        assert "invalid_json" in out["message"], out["message"]
    said_stop = {"anthropic": "end_turn", "openai-chat": "stop", "openai-responses": None}[provider]
    both = Reply(content="Order 742 is CLOSED", tool_calls=(ORDER,), finish_reason=said_stop)
    code, out, bodies = run_turns(tmp_path / "both", provider, [both, Reply.text(ANSWER)], mode=mode)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


# -- pinned: accounting ------------------------------------------------------------------------

BIG = 10**12


@pytest.mark.parametrize("limit", [{"max_tokens": 5000}, {"max_cost_usd": 0.05}], ids=["tokens", "cost"])
@pytest.mark.parametrize("field", ["cache_read_input_tokens", "cache_creation_input_tokens"])
def test_anthropic_cache_counts_far_past_the_prompt_are_counted_and_stop_the_run(
    tmp_path: Path, field: str, limit: dict[str, Any]
) -> None:
    usage = {"input_tokens": 100, "output_tokens": 10, field: BIG}
    prices = {"m-1": {"input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}}
    replies = [Reply.calls(("read_order", f'{{"order_id": "{i}"}}'), usage=usage) for i in range(8)]
    code, out, bodies = run_turns(tmp_path, "anthropic", replies, limits=limit, prices=prices)
    assert (code, out["stop_reason"], len(bodies)) == (4, "budget", 2), out  # the call, the last turn
    assert out["tokens"] == 2 * (BIG + 110) and 0 < out["cost_usd"] < float("inf"), out


def no_usage(items: list[Any]) -> list[Any]:
    """Every ``usage`` null, and a chat stream's usage chunk left out."""

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if "usage" in v:
                v["usage"] = None
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    kept = [i for i in items if not (isinstance(i, dict) and i.get("usage") and i.get("choices") == [])]
    walk(kept)
    return kept


@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_left_out_of_every_answer_is_estimated(tmp_path: Path, provider: str, mode: str) -> None:
    replies = [Reply.calls(ORDER, edit=no_usage), Reply.text(ANSWER, edit=no_usage)]
    code, out, _ = run_turns(tmp_path, provider, replies, mode=mode, limits={"max_tokens": 50})
    assert (code, out["stop_reason"]) == (4, "budget") and out["tokens"] >= 100, out  # estimated, counted


# -- pinned: a fallback after a later turn cut mid-stream ---------------------------------------

PARTIAL = "PARTIAL-TEXT-OF-THE-CUT-TURN"


@pytest.mark.parametrize("second", PROVIDERS)
@pytest.mark.parametrize("first", PROVIDERS)
def test_a_fallback_after_a_later_turn_cut_mid_stream_carries_nothing_of_it(
    tmp_path: Path, first: str, second: str
) -> None:
    a = [Reply(content="Let me look. ", tool_calls=(ORDER,), reasoning="thought-one"),
         Reply(content=PARTIAL, tool_calls=(OTHER,), reasoning="thought-two", cut="mid_chunk")]  # fmt: skip
    with SERVERS[first](scripted(a)) as one, SERVERS[second](scripted([Reply.text(ANSWER)])) as two:
        each = {"max_retries": 0, "timeout_s": 5, "streaming": True, "transport": "http"}
        backup = {"provider": second, "name": "m-b", "base_url": two.url, **each}
        model = {"provider": first, "name": "m-a", "base_url": one.url, **each, "fallback": [backup]}
        path = write_agent(tmp_path, {**model, "limits": {"deadline_s": 30}})
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        [body] = two.bodies()
    summary = json.loads(out.getvalue().strip().split("\n")[-1])
    assert (code, summary["stop_reason"], summary["answer"]) == (0, "accepted", ANSWER), summary
    assert [c["status"] for c in summary["calls"]] == ["ok"], summary
    sent = json.dumps(body)
    assert "PARTIAL" not in sent and "743" not in sent and "thought-two" not in sent, sent
    assert first == second or ("thought-one" not in sent and "enc:" not in sent), sent
