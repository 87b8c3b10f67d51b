"""Model faults, round thirty-eight: servers of each protocol (chat completions, Responses,
Anthropic Messages) that answer well for some turns and then fail, across a multi-turn run with a
side-effecting tool, alone and in a ``model.fallback`` chain, driven through ``tether run`` and
``tether resume`` with agent files (streamed and whole, over plain httpx and the SDK transport)
and through the Python API, against real servers on 127.0.0.1.

Probed, all already honest; pinned here so they stay so:

- a call id a later turn gives again (turn 3 under turn 1's id, a read under a write's id, the
  exact call that already ran under its own id): each is a call of its own, run once, its result
  paired with it in every later request; nothing is skipped as "already done", nothing repeated;
- a turn that fails after a turn whose effect ran (a 500, a 429 whose wait passes the run's
  deadline, a stream that gave a whole call and then ended cleanly, died or stalled before its
  finish, a negative token count, a body of another protocol's shape): ``model_error``, exit 7,
  the unfinished call never run, and ``tether resume`` continues from the checkpoint: the effect
  is not repeated, the resumed request holds the call and its result, the token count goes on;
- a fallback model failing otherwise than the primary (529 then 401): the error names each, in
  order, after its provider, the trace's ``model_error`` lists both, and the run resumes;
- a fallback giving call ids in another protocol's form (``functions.stamp:0`` on every turn, 64
  characters, spaces and accents, ``toolu_``): every request to either server pairs each result
  with its call under ids that server accepts, each id once;
- tokens and cost counted across the models of a chain and across failed attempts a server
  billed; usage unreadable on one turn only (that turn retried, the count never negative); cache
  reads past the prompt (the cost never negative); the model an answer names changing mid-run.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_faults_heldout import SERVERS

from tether import Agent, Effect, Host, TrustedContext, tool
from tether.cli import main
from tether.models import AnthropicMessages, OpenAICompatible, OpenAIResponses, RetryPolicy
from tether.models._fallback import FallbackModel
from tether.policy import Approvals, SqliteApprovalStore
from tether.policy._rules import Policy
from tether_testing.fake_server import Pause, Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = sorted(SERVERS)
MODES = ["stream", "whole"]
TOOLS = '''
import os
from typing import Annotated
from pydantic import Field
from tether import Effect, tool

@tool(effect=Effect.WRITE)
def stamp(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Stamp a work order."""
    with open(os.environ["ROUND38_STAMPS"], "a", encoding="utf-8") as f:
        f.write(order_id + "\\n")
    return {"order_id": order_id, "stamped": True}

@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}
'''
U = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
PRICES = {"m-1": {"input": 1.0, "output": 10.0}, "m-2": {"input": 2.0, "output": 20.0}}
Respond = Callable[[dict[str, Any], int], Reply]


def stamp(order: str, **kw: Any) -> Reply:
    kw.setdefault("usage", dict(U))
    return Reply.calls(("stamp", json.dumps({"order_id": order})), **kw)


def done(**kw: Any) -> Reply:
    return Reply.text("All stamped.", usage=dict(U), **kw)


@pytest.fixture
def stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[str]]]:
    """The order ids the ``stamp`` tool wrote, in order (each effect once per line)."""
    path = tmp_path / "stamped.txt"
    monkeypatch.setenv("ROUND38_STAMPS", str(path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-round38-test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-round38-test-key")
    yield lambda: path.read_text(encoding="utf-8").split() if path.exists() else []


def ids_as(*ids: str) -> Callable[[list[Any]], list[Any]]:
    """``Reply.edit``: the answer's tool-call ids, in the order they first appear, become ``ids``
    (every protocol: chat ``id``, Anthropic ``toolu_`` ids, Responses ``call_id``)."""

    def edit(items: list[Any]) -> list[Any]:
        items, seen = copy.deepcopy(items), {}

        def new(old: str) -> str:
            return seen.setdefault(old, ids[len(seen)] if len(seen) < len(ids) else old)

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    own = k == "id" and isinstance(v, str) and v.startswith(("call_", "toolu_"))
                    if own or (k == "call_id" and isinstance(v, str)):
                        value[k] = new(v)
                    else:
                        walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(items)
        return items

    return edit


def model(provider: str, url: str, mode: str, transport: str = "http", **kw: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "name": kw.pop("name", "m-1"),
        "base_url": url,
        "timeout_s": 3,
        "max_retries": 1,
        "streaming": mode == "stream",
        "transport": transport,
        **kw,
    }


def agent_file(tmp_path: Path, models: list[dict[str, Any]], limits: dict[str, Any] | None = None) -> Path:
    (tmp_path / "tools_round38.py").write_text(TOOLS, encoding="utf-8")
    first = {**models[0], "limits": {"deadline_s": 30, **(limits or {})}}
    if len(models) > 1:
        first["fallback"] = models[1:]
    spec = {
        "name": "stamper",
        "instructions": "Stamp the orders asked for.",
        "model": first,
        "tools": ["tools_round38:stamp", "tools_round38:read_order"],
        "trace": {"dir": "traces"},
        "policy": {"automatic": ["read", "write"], "approvals_db": str(tmp_path / "approvals.db")},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def cli(*args: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*args, "--json"])
    return code, json.loads(out.getvalue().strip().split("\n")[-1])


def run(
    tmp_path: Path, models: list[dict[str, Any]], limits: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    return cli("run", "Stamp the orders.", "--agent", str(agent_file(tmp_path, models, limits)))


def resume(tmp_path: Path, run_id: str) -> tuple[int, dict[str, Any]]:
    return cli("resume", run_id, "--db", str(tmp_path / "approvals.db"))


def events(out: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    lines = Path(out["trace"]).read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


# -- what a request pairs: each result with its call, each id once, in a form the API takes ------

_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


def pairing(provider: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """Each tool call of the request's history as ``(its arguments, the result answering it)``,
    after checking that each id is sent once and in a form the provider takes, and that every
    result answers a call of the assistant turn before it."""
    calls: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []

    def call(cid: str, arguments: Any) -> None:
        assert cid not in calls, f"call id {cid!r} sent twice"
        if provider == "openai-chat":
            assert len(cid) <= 40, cid
        if provider == "anthropic":
            assert _ANTHROPIC_ID.fullmatch(cid), cid
        calls[cid] = arguments if isinstance(arguments, str) else json.dumps(arguments)

    def result(cid: str, content: Any) -> None:
        assert cid in calls, f"a result for {cid!r}, no call of that id"
        pairs.append((calls[cid], json.dumps(content)))

    if provider == "openai-responses":
        for item in body["input"]:
            if item.get("type") == "function_call":
                call(item["call_id"], item["arguments"])
            elif item.get("type") == "function_call_output":
                result(item["call_id"], item["output"])
        return pairs
    for message in body["messages"]:
        if provider == "openai-chat":
            for c in message.get("tool_calls") or ():
                call(c["id"], c["function"]["arguments"])
            if message.get("role") == "tool":
                result(message["tool_call_id"], message["content"])
            continue
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") == "tool_use":
                call(block["id"], block["input"])
            elif block.get("type") == "tool_result":
                result(block["tool_use_id"], block["content"])
    return pairs


def paired_orders(provider: str, body: dict[str, Any]) -> list[str]:
    """The order id of each call in the request's history, checked to be the one its result
    names (a result paired with another call's id would name another order)."""
    orders = []
    for arguments, content in pairing(provider, body):
        order = json.loads(arguments)["order_id"]
        assert f'\\"order_id\\": \\"{order}\\"' in content, (arguments, content)
        orders.append(order)
    return orders


# -- call ids given again in a later turn ---------------------------------------------------------

AGAIN = {
    # turn 3 stamps another order under turn 1's id
    "another_effect": (
        [
            stamp("742", edit=ids_as("call_AAA")),
            stamp("743", edit=ids_as("call_BBB")),
            stamp("744", edit=ids_as("call_AAA")),
        ],
        ["742", "743", "744"],
    ),
    # turn 2 reads under the id of turn 1's write
    "another_tool": (
        [
            stamp("742", edit=ids_as("call_AAA")),
            Reply.calls(("read_order", '{"order_id": "742"}'), usage=dict(U), edit=ids_as("call_AAA")),
        ],
        ["742"],
    ),
    # turn 3 proposes again, under its id, the exact call turn 1 ran: the model asked again
    "the_same_call": (
        [
            stamp("742", edit=ids_as("call_AAA")),
            Reply.calls(("read_order", '{"order_id": "742"}'), usage=dict(U), edit=ids_as("call_BBB")),
            stamp("742", edit=ids_as("call_AAA")),
        ],
        ["742", "742"],
    ),
}


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", sorted(AGAIN))
def test_a_call_id_a_later_turn_gives_again_names_a_call_of_its_own(
    tmp_path: Path, stamps: Callable[[], list[str]], provider: str, mode: str, transport: str, case: str
) -> None:
    replies, effects = AGAIN[case]
    script = [*replies, done()]
    with SERVERS[provider](lambda request, i: script[min(i, len(script) - 1)]) as server:
        code, out = run(tmp_path, [model(provider, server.url, mode, transport)])
        bodies = server.bodies()
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", "All stamped."), out
    assert stamps() == effects, "each call ran once, none skipped as already done"
    assert [c["status"] for c in out["calls"]] == ["ok"] * len(replies), out["calls"]
    assert len(bodies) == len(script)
    last = pairing(provider, bodies[-1])
    assert len(last) == len(replies), last
    stamped = [o for o in paired_orders(provider, bodies[-1])]
    assert stamped[0] == "742" and len(stamped) == len(replies)


# -- a later turn fails; the run is resumed --------------------------------------------------------


def stalled_after_call(provider: str) -> Callable[[list[Any]], list[Any]]:
    """A stream that has given one whole tool call, then stalls before its finish (past the
    call's ``timeout_s``): no finish reason, no ``message_delta``, no ``response.completed``."""

    def edit(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                if provider == "openai-chat" and any(
                    c.get("finish_reason") for c in item.get("choices") or ()
                ):
                    break
                if item.get("type") in ("message_delta", "response.completed"):
                    break
            out.append(item)
        return [*out, Pause(5)]

    return edit


OTHER_SHAPE = {
    "openai-chat": {
        "id": "msg_z",
        "type": "message",
        "role": "assistant",
        "model": "m-1",
        "content": [{"type": "tool_use", "id": "toolu_z", "name": "stamp", "input": {"order_id": "9"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    "anthropic": {
        "id": "resp_z",
        "object": "response",
        "status": "completed",
        "model": "m-1",
        "output": [
            {
                "type": "function_call",
                "id": "fc_z",
                "call_id": "call_z",
                "name": "stamp",
                "arguments": '{"order_id": "9"}',
                "status": "completed",
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    "openai-responses": {
        "id": "x",
        "object": "chat.completion",
        "model": "m-1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_z",
                            "type": "function",
                            "function": {"name": "stamp", "arguments": '{"order_id": "9"}'},
                        }
                    ],
                },
            }
        ],
    },
}

FAILURES: dict[str, Callable[[str], Reply]] = {
    "http_500": lambda provider: Reply.error(500, "boom"),
    "429_past_the_deadline": lambda provider: Reply.error(429, "slow down", headers={"retry-after": "3600"}),
    "call_then_clean_end": lambda provider: stamp("9", cut="before_finish"),
    "call_then_dropped": lambda provider: stamp("9", cut="mid_chunk"),
    "call_then_stall": lambda provider: stamp("9", edit=stalled_after_call(provider)),
    "negative_usage": lambda provider: stamp(
        "9", usage={"prompt_tokens": -5, "completion_tokens": 3, "total_tokens": -2}
    ),
    "another_protocol": lambda provider: Reply(
        edit=lambda items: [json.dumps(OTHER_SHAPE[provider]).encode()],
        headers={"content-type": "application/json"},
    ),
}


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_run_a_later_turn_failed_resumes_without_repeating_its_effect(
    tmp_path: Path, stamps: Callable[[], list[str]], provider: str, mode: str, transport: str, failure: str
) -> None:
    if failure == "call_then_stall" and mode == "whole":
        pytest.skip("a stream's fault")
    phase = ["failing"]

    def respond(request: dict[str, Any], i: int) -> Reply:
        if phase[0] == "failing":
            return stamp("742") if i == 0 else FAILURES[failure](provider)
        return done()

    with SERVERS[provider](respond) as server:
        code, out = run(tmp_path, [model(provider, server.url, mode, transport)])
        assert (code, out["stop_reason"]) == (7, "model_error"), out
        assert stamps() == ["742"], "the failed turn's call never ran"
        assert events(out, "model_error"), "the trace says the model failed"
        first = len(server.bodies())
        phase[0] = "answering"
        code, again = resume(tmp_path, out["run_id"])
        bodies = server.bodies()
    assert (code, again["stop_reason"], again["answer"]) == (0, "accepted", "All stamped."), again
    assert stamps() == ["742"], "no effect repeated by the resume"
    assert len(bodies) == first + 1 and paired_orders(provider, bodies[-1]) == ["742"]
    assert again["tokens"] >= out["tokens"] + 1100 >= 2200, (out["tokens"], again["tokens"])


# -- fallback chains -------------------------------------------------------------------------------

PAIRS = list(itertools.permutations(PROVIDERS, 2))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_a_fallback_failing_otherwise_than_the_primary_names_each_and_resumes(
    tmp_path: Path, stamps: Callable[[], list[str]], first: str, second: str, mode: str
) -> None:
    phase = ["failing"]
    primary = lambda request, i: stamp("742") if i == 0 else Reply.error(529, "overloaded")  # noqa: E731

    def backup(request: dict[str, Any], i: int) -> Reply:
        return Reply.error(401, "invalid x-api-key") if phase[0] == "failing" else done()

    with SERVERS[first](primary) as one, SERVERS[second](backup) as two:
        chain = [model(first, one.url, mode), model(second, two.url, mode, name="m-2")]
        code, out = run(tmp_path, chain)
        assert (code, out["stop_reason"]) == (7, "model_error"), out
        said = out["message"]
        assert (
            f"{first} model m-1: overloaded: HTTP 529" in said and f"{second} model m-2: HTTP 401" in said
        ), said
        assert said.index(f"{first} model m-1") < said.index(f"{second} model m-2"), said
        failed = events(out, "model_error")[-1]["fallback_from"]
        assert [(f["model"], f["provider"]) for f in failed] == [("m-1", first), ("m-2", second)], failed
        assert stamps() == ["742"]
        phase[0] = "answering"
        code, again = resume(tmp_path, out["run_id"])
    assert (code, again["stop_reason"]) == (0, "accepted"), again
    assert stamps() == ["742"]
    assert again["model_fallbacks"][0]["to"] == "m-2", again


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_budgets_count_across_the_models_of_a_chain(
    tmp_path: Path, stamps: Callable[[], list[str]], first: str, second: str, mode: str
) -> None:
    """Turn 1 on the primary; its turn 2 fails (529 twice); the fallback answers turns 2 and 3:
    tokens are the three answers', cost each at its own model's price."""
    primary = lambda request, i: stamp("742") if i == 0 else Reply.error(529, "overloaded")  # noqa: E731
    backup = lambda request, i: stamp("743") if i == 0 else done()  # noqa: E731
    with SERVERS[first](primary) as one, SERVERS[second](backup) as two:
        chain = [model(first, one.url, mode, prices=PRICES), model(second, two.url, mode, name="m-2")]
        code, out = run(tmp_path, chain)
    assert (code, out["stop_reason"], stamps()) == (0, "accepted", ["742", "743"]), out
    assert out["tokens"] == 3 * 1100 and out["llm_calls"] == 3, out
    assert out["cost_usd"] == pytest.approx(0.002 + 2 * 0.004), out


@pytest.mark.parametrize("ids", ["functions.stamp:0", "chatcmpl-tool-" + "a" * 50, "call 1/é", "toolu_01A"])
@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_call_ids_in_another_protocols_form_pair_across_a_fallback(
    tmp_path: Path, stamps: Callable[[], list[str]], first: str, second: str, ids: str
) -> None:
    """Both models give every call the same id of an odd form on every turn; the primary fails
    after two turns: each request to either server pairs each result with its own call."""
    primary = lambda request, i: stamp(str(742 + i), edit=ids_as(ids)) if i < 2 else Reply.error(503, "down")  # noqa: E731
    backup = lambda request, i: stamp(str(800 + i), edit=ids_as(ids)) if i < 2 else done()  # noqa: E731
    with SERVERS[first](primary) as one, SERVERS[second](backup) as two:
        code, out = run(
            tmp_path, [model(first, one.url, "stream"), model(second, two.url, "stream", name="m-2")]
        )
        sent = [(first, b) for b in one.bodies()] + [(second, b) for b in two.bodies()]
    assert (code, out["stop_reason"]) == (0, "accepted"), out
    assert stamps() == ["742", "743", "800", "801"]
    for provider, body in sent:
        paired_orders(provider, body)
    assert paired_orders(second, two.bodies()[-1]) == ["742", "743", "800", "801"]


# -- fixed: a fallback to another endpoint of the Responses API ----------------------------------


def reads_only_its_own_reasoning(issued: list[str], order: str = "800") -> Respond:
    """A Responses server that, as the API does without ``store``, refuses (HTTP 400) a request
    holding a reasoning item whose encrypted content it did not issue, and answers a call and
    then text, reasoning on each turn (``issued``: the reasoning item ids it gave)."""
    seen = [0]

    def respond(request: dict[str, Any], i: int) -> Reply:
        theirs = [t.get("id") for t in request.get("input", ()) if t.get("type") == "reasoning"]
        if foreign := [t for t in theirs if t not in issued]:
            return Reply.error(400, f"The encrypted content for item {foreign[0]} could not be verified.")
        seen[0] += 1
        reply = stamp(order, reasoning="Thinking.") if seen[0] == 1 else done(reasoning="Done thinking.")

        def note(items: list[Any]) -> list[Any]:
            text = json.dumps(items)
            issued.extend(t for t in re.findall(r'"(rs_[0-9]+)"', text) if t not in issued)
            return items

        return replace(reply, edit=note)

    return respond


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("mode", MODES)
def test_a_fallback_to_another_responses_endpoint_is_not_sent_the_primarys_reasoning(
    tmp_path: Path, stamps: Callable[[], list[str]], mode: str, transport: str
) -> None:
    """The primary reasons and calls, then fails (503 twice); the fallback, another Responses
    endpoint, cannot read the primary's encrypted reasoning: it is sent none of it, and answers
    (before: sent the primary's reasoning item, it refused every request, HTTP 400, and the
    run ended ``model_error`` on a turn its model could answer). Its own reasoning goes back
    to it on the next turn."""
    primary_ids: list[str] = []
    backup_ids: list[str] = []
    first_turn = reads_only_its_own_reasoning(primary_ids, "742")
    primary = lambda request, i: first_turn(request, i) if i == 0 else Reply.error(503, "down")  # noqa: E731

    with (
        SERVERS["openai-responses"](primary) as one,
        SERVERS["openai-responses"](reads_only_its_own_reasoning(backup_ids)) as two,
    ):
        chain = [
            model("openai-responses", one.url, mode, transport),
            model("openai-responses", two.url, mode, transport, name="m-2"),
        ]
        code, out = run(tmp_path, chain)
        sent = two.bodies()
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", "All stamped."), out
    assert stamps() == ["742", "800"]
    assert primary_ids and backup_ids, (primary_ids, backup_ids)
    reasoning = [[t["id"] for t in b["input"] if t.get("type") == "reasoning"] for b in sent]
    assert reasoning == [[], backup_ids[:1]], reasoning
    assert all("origin" not in t and "provider" not in t for b in sent for t in b["input"]), sent


@pytest.mark.parametrize("mode", MODES)
def test_reasoning_goes_back_to_the_endpoint_that_gave_it(
    tmp_path: Path, stamps: Callable[[], list[str]], mode: str
) -> None:
    """One endpoint, no fallback: its reasoning item is sent back to it, as the API requires."""
    issued: list[str] = []
    with SERVERS["openai-responses"](reads_only_its_own_reasoning(issued)) as server:
        code, out = run(tmp_path, [model("openai-responses", server.url, mode)])
        sent = server.bodies()
    assert (code, out["stop_reason"], stamps()) == (0, "accepted", ["800"]), out
    assert [t["id"] for t in sent[-1]["input"] if t.get("type") == "reasoning"] == issued[:1]


def test_a_resumed_chain_sends_the_primary_only_its_own_reasoning(
    tmp_path: Path, stamps: Callable[[], list[str]]
) -> None:
    """Turn 1 on the primary (reasoning, a call), turn 2 on the fallback (its own reasoning, a
    call), turn 3 fails on both: ``model_error``. Resumed, the run starts on the primary again,
    sent its own reasoning item and not the fallback's, and its answer stands; no effect runs
    again (before: sent the fallback's item, it refused, and the resume failed too)."""
    primary_ids: list[str] = []
    backup_ids: list[str] = []
    phase = ["failing"]
    first_turn = reads_only_its_own_reasoning(primary_ids, "742")
    backup_turn = reads_only_its_own_reasoning(backup_ids, "800")

    def primary(request: dict[str, Any], i: int) -> Reply:
        if phase[0] == "answering":
            foreign = [t.get("id") for t in request["input"] if t.get("type") == "reasoning"]
            if any(t not in primary_ids for t in foreign):
                return Reply.error(
                    400, f"The encrypted content for item {foreign[-1]} could not be verified."
                )
            return done()
        return first_turn(request, i) if i == 0 else Reply.error(503, "down")

    def backup(request: dict[str, Any], i: int) -> Reply:
        return backup_turn(request, i) if i == 0 else Reply.error(500, "boom")

    with SERVERS["openai-responses"](primary) as one, SERVERS["openai-responses"](backup) as two:
        chain = [
            model("openai-responses", one.url, "stream"),
            model("openai-responses", two.url, "stream", name="m-2"),
        ]
        code, out = run(tmp_path, chain)
        assert (code, out["stop_reason"], stamps()) == (7, "model_error", ["742", "800"]), out
        phase[0] = "answering"
        code, again = resume(tmp_path, out["run_id"])
        last = one.bodies()[-1]
    assert (code, again["stop_reason"], again["answer"]) == (0, "accepted", "All stamped."), again
    assert stamps() == ["742", "800"]
    assert [t["id"] for t in last["input"] if t.get("type") == "reasoning"] == primary_ids[:1]
    assert paired_orders("openai-responses", last) == ["742", "800"]


# -- usage on one turn only -------------------------------------------------------------------------


def usage_as(value: Any) -> Callable[[list[Any]], list[Any]]:
    def edit(items: list[Any]) -> list[Any]:
        items = copy.deepcopy(items)

        def walk(x: Any) -> None:
            if isinstance(x, dict):
                for k in list(x):
                    if k == "usage" and isinstance(x[k], dict):
                        x[k] = value
                    else:
                        walk(x[k])
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(items)
        return items

    return edit


CACHED = {  # cache reads ten times the prompt, as each protocol reports them
    "openai-chat": {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 1000},
    },
    "openai-responses": {
        "input_tokens": 100,
        "output_tokens": 10,
        "input_tokens_details": {"cached_tokens": 1000},
    },
    "anthropic": {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 1000},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("turn2", ["unreadable", "missing", "cache_past_prompt"])
def test_usage_broken_on_one_turn_keeps_the_counts_sane(
    tmp_path: Path, stamps: Callable[[], list[str]], provider: str, mode: str, turn2: str
) -> None:
    """Turn 2's usage is a string (unusable: asked again), left out (estimated) or cache reads
    ten times its prompt: the run ends accepted, its tokens at least the good turns', its cost
    never negative."""
    edits = {
        "unreadable": usage_as("lots"),
        "missing": usage_as(None),
        "cache_past_prompt": usage_as(CACHED[provider]),
    }
    script = [stamp("742"), stamp("743", edit=edits[turn2]), stamp("743"), done()]
    if turn2 != "unreadable":
        del script[2]
    with SERVERS[provider](lambda request, i: script[min(i, len(script) - 1)]) as server:
        code, out = run(tmp_path, [model(provider, server.url, mode, prices=PRICES)])
        asked = len(server.bodies())
    assert (code, out["stop_reason"], stamps()) == (0, "accepted", ["742", "743"]), out
    assert asked == len(script)
    assert out["tokens"] >= 2 * 1100 + 1 and out["cost_usd"] >= 0.004, out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_absurd_count_on_one_turn_stops_the_run_at_its_budget(
    tmp_path: Path, stamps: Callable[[], list[str]], provider: str
) -> None:
    absurd = {"prompt_tokens": 10**15, "completion_tokens": 5, "total_tokens": 10**15 + 5}
    script = [stamp("742"), stamp("743", usage=absurd), stamp("744"), done()]
    with SERVERS[provider](lambda request, i: script[min(i, len(script) - 1)]) as server:
        code, out = run(tmp_path, [model(provider, server.url, "stream")], {"max_tokens": 50_000})
    assert (code, out["stop_reason"]) == (4, "budget"), out
    assert stamps() == ["742", "743"] and out["tokens"] >= 10**15, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("named", ["another-model-xyz", "gpt-4o-mini", None])
def test_the_model_an_answer_names_changing_mid_run_is_accepted_and_priced(
    tmp_path: Path, stamps: Callable[[], list[str]], provider: str, mode: str, named: str | None
) -> None:
    def rename(items: list[Any]) -> list[Any]:
        items = copy.deepcopy(items)
        for item in items:
            for holder in (item, item.get("message"), item.get("response")) if isinstance(item, dict) else ():
                if isinstance(holder, dict) and "model" in holder:
                    holder["model"] = named
        return items

    script = [stamp("742"), stamp("743", edit=rename), done()]
    with SERVERS[provider](lambda request, i: script[min(i, len(script) - 1)]) as server:
        code, out = run(tmp_path, [model(provider, server.url, mode, prices=PRICES)])
    assert (code, out["stop_reason"], stamps()) == (0, "accepted", ["742", "743"]), out
    assert out["tokens"] == 3300 and out["cost_usd"] > 0 and not out["unpriced"], out


# -- the Python API --------------------------------------------------------------------------------

_STAMPED: list[str] = []


@tool(effect=Effect.WRITE)
def api_stamp(order_id: str) -> dict[str, Any]:
    """Stamp a work order.

    Args:
        order_id: Work order id.
    """
    _STAMPED.append(order_id)
    return {"order_id": order_id, "stamped": True}


BACKENDS: dict[str, Any] = {
    "openai-chat": OpenAICompatible,
    "openai-responses": OpenAIResponses,
    "anthropic": AnthropicMessages,
}


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_the_python_api_resumes_a_chain_that_failed_without_repeating_an_effect(
    tmp_path: Path, stamps: Callable[[], list[str]], first: str, second: str
) -> None:
    _STAMPED.clear()
    phase = ["failing"]
    call = lambda: Reply.calls(("api_stamp", '{"order_id": "742"}'), usage=dict(U))  # noqa: E731

    def primary(request: dict[str, Any], i: int) -> Reply:
        return call() if i == 0 else Reply.error(503, "down")

    def backup(request: dict[str, Any], i: int) -> Reply:
        return Reply.error(500, "boom") if phase[0] == "failing" else done()

    def build(one: str, two: str) -> tuple[Host, Agent]:
        retry = RetryPolicy(max_retries=1, base_delay_s=0.01)
        chain = FallbackModel(
            [
                BACKENDS[first]("m-1", base_url=one, stream=True, timeout_s=3, retry=retry),
                BACKENDS[second]("m-2", base_url=two, stream=False, timeout_s=3, retry=retry),
            ]
        )
        policy = Policy(automatic_effects=[Effect.READ, Effect.WRITE])
        host = Host(
            policy=policy, trace_dir=tmp_path, approvals=Approvals(SqliteApprovalStore(tmp_path / "a.db"))
        )
        host.add_tools(api_stamp)
        return host, Agent(instructions="Stamp.", model=chain)

    context = TrustedContext(tenant="shop")
    with SERVERS[first](primary) as one, SERVERS[second](backup) as two:
        host, agent = build(one.url, two.url)
        result = host.run_sync(agent, "Stamp 742.", context=context)
        assert str(result.stop_reason) == "model_error" and _STAMPED == ["742"], result
        phase[0] = "answering"
        host, agent = build(one.url, two.url)
        again = host.resume_sync(agent, result.run_id)
    assert str(again.stop_reason) == "accepted" and again.answer == "All stamped.", again
    assert _STAMPED == ["742"]
