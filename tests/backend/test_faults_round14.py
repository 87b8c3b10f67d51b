"""A fourteenth round: tool-call content and conversation state across turns, driven as the others
are (an agent file naming ``model.provider`` and ``tether run`` in process,
``test_faults_round10.run_agent``) against real servers on 127.0.0.1 speaking each protocol,
whole and streamed; the same fault ends the same honest way on all three.

Responses without ``store`` (the default: nothing is kept server-side, a reasoning item is its
``encrypted_content``): a reasoning item that came without its encrypted content is not sent
back, counted in the answer's meta (``reasoning_not_kept``), the run accepted (before: it went
back as its bare id, which the API looks up, finds nothing kept and refuses, HTTP 404, so the
turn after the tool ran ended ``model_error``); one with it goes back as it came.

The final-answer claim check (``hooks.check_claims``) refuses a claimed action written as models
write it, with a typographic apostrophe (``We’ve cancelled``) or a non-breaking hyphen
(``e‑mailed``), on every protocol (before: only the ASCII spelling was caught, and the false
claim was accepted as the run's answer).

Held as they were (each ending the same way on every protocol and transport): arguments
encoded twice (the JSON text of a string that holds the object's JSON; an Anthropic whole
answer's ``input`` the text of that string, as its ``input`` as the object's JSON text is a quirk
accepted, ``test_faults_heldout``) are refused by the gate, the tool not run, the object itself
running; a call naming a
tool the run offers otherwise (``erp__read_order``, ``Read_Order``, ``read_order `` with a
trailing space, ``rеad_order`` with a Cyrillic ``е``) is refused, never run as another tool; an
Anthropic stream whose input JSON never closes before ``content_block_stop`` is refused as
malformed arguments. (Probed the same on every protocol, covered elsewhere: arguments that are a
top-level array or megabytes long are refused by the gate; the same call every turn, its JSON
spelled otherwise each time, stops the run ``repetition``.)
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent
from test_faults_round3 import walk
from test_faults_round10 import run_agent

from tether.cli import main
from tether_testing.fake_server import Reply, scripted
from tether_testing.servers import FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = ("openai-chat", "anthropic", "openai-responses")
TWICE = ("read_order", json.dumps(ORDER[1]))  # '"{\"order_id\": \"742\"}"'
# An Anthropic whole answer's ``input`` is the value the raw JSON spells (the fake server reads
# it): the text of the object's JSON is a quirk accepted, so twice-encoded is one level more.
TWICE_INPUT = ("read_order", json.dumps(TWICE[1]))


def model_of(provider: str, url: str, stream: bool, **more: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "name": "m-1",
        "base_url": url,
        "streaming": stream,
        "transport": "http",
        "max_retries": 1,
        "timeout_s": 5,
        **more,
    }


def results_sent(request: dict[str, Any]) -> list[str]:
    """The tool results the request sends back (each protocol's form), as text."""
    found: list[str] = []
    for m in request.get("messages") or request.get("input") or ():
        for block in [m, *(m.get("content") if isinstance(m.get("content"), list) else ())]:
            if not isinstance(block, dict):
                continue
            if block.get("role") == "tool" or block.get("type") == "function_call_output":
                found.append(str(block.get("content") or block.get("output")))
            elif block.get("type") == "tool_result":
                found.append(str(block.get("content")))
    return found


# -- arguments encoded twice -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_arguments_encoded_twice_are_refused_on_every_protocol(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """The call's arguments are the JSON text of a string holding the object's JSON (chat and
    Responses ``arguments``; Anthropic's ``input`` that string, whole, or its ``partial_json``
    spelling it, streamed): the gate refuses them, the tool does not run, the result sent back
    says why, and the model's next answer is accepted. The same call with the object runs."""
    twice = TWICE_INPUT if provider == "anthropic" and not stream else TWICE
    with SERVERS[provider](scripted([Reply.calls(twice), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        bodies = server.bodies()
    assert (out["stop_reason"], out["answer"], len(bodies)) == ("accepted", ANSWER, 2), out
    assert code != 0 and [c["status"] for c in out["calls"]] == ["rejected"], out
    (sent,) = results_sent(bodies[1])
    assert '"reject"' in sent and '"status": "open"' not in sent, sent
    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        (sent,) = results_sent(server.bodies()[1])
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok"] and '"status": "open"' in sent, out


# -- Responses: a reasoning item without its encrypted content -------------------------------------


def without_encrypted_content(items: list[Any]) -> list[Any]:
    """Every reasoning item (its ``output_item`` events, the terminal output) without
    ``encrypted_content``: a proxy that drops fields it does not know."""
    return walk(items, lambda d: d.pop("encrypted_content", None))


def refuses_reasoning_not_kept(replies: list[Reply]) -> Any:
    """A Responses server that, as the API does without ``store``, refuses a request whose
    reasoning item comes without its encrypted content (it would look the id up: nothing kept)."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        items = [
            i for i in request.get("input") or () if isinstance(i, dict) and i.get("type") == "reasoning"
        ]
        if request.get("store") is False and any(not i.get("encrypted_content") for i in items):
            message = f"Item with id '{items[0].get('id')}' not found; `store` is false."
            return FakeResponsesServer.error(404, message)
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


@pytest.mark.parametrize("stream", [False, True])
def test_a_reasoning_item_without_encrypted_content_is_not_sent_back_without_store(
    tmp_path: Path, stream: bool
) -> None:
    """Without ``store``, the call's turn comes with a reasoning item that lost its encrypted
    content: it is not sent back (the next request holds no reasoning item), the run is accepted,
    the turn's ``model_response`` counting the item not kept (before: it went back as its bare
    id, the API's 404 ended the run ``model_error`` after the tool had run); one with its
    encrypted content is sent back with it."""
    for edit, kept in ((without_encrypted_content, False), (None, True)):
        replies = [Reply(reasoning="Read the order.", tool_calls=(ORDER,), edit=edit), Reply.text(ANSWER)]
        with FakeResponsesServer(refuses_reasoning_not_kept(replies)) as server:
            model = model_of("openai-responses", server.url, stream, reasoning_effort="low")
            code, out, responses = run_agent(tmp_path, model)
            second = server.bodies()[1]
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert second["include"] == ["reasoning.encrypted_content"], second
        sent = [i for i in second["input"] if i.get("type") == "reasoning"]
        assert len(sent) == (1 if kept else 0) and all(i["encrypted_content"] for i in sent), second
        assert responses[0].get("reasoning_not_kept") == (None if kept else 1), responses[0]


# -- the final-answer claim check, as models write a claim -----------------------------------------

CLAIMS = (
    "We\u2019ve cancelled order 742.",  # a typographic apostrophe, as models write it
    "I e\u2011mailed the buyer about order 742.",  # a non-breaking hyphen
    "We've cancelled order 742.",  # the ASCII spelling, checked before
)


def run_checking_claims(tmp_path: Path, model: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``tether run --agent`` with ``hooks.check_claims`` on: exit code, JSON summary."""
    path = write_agent(tmp_path, model)
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**spec, "hooks": {"check_claims": True}}), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
    return code, json.loads(out.getvalue().strip().split("\n")[-1])


@pytest.mark.parametrize("claim", CLAIMS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_claimed_action_is_refused_however_its_apostrophe_or_hyphen_is_written(
    tmp_path: Path, provider: str, claim: str
) -> None:
    """The run only read the order, then the model's final answer claims an action it never took,
    written with a typographic apostrophe (``We’ve cancelled``) or a non-breaking hyphen
    (``e‑mailed``): the claim check refuses it on every protocol, the model asked again, and its
    next answer (what the tool showed) is accepted (before: only the ASCII spelling was caught,
    the false claim accepted as the run's answer)."""
    replies = [Reply.calls(ORDER), Reply.text(claim), Reply.text(ANSWER)]
    with SERVERS[provider](scripted(replies)) as server:
        code, out = run_checking_claims(tmp_path, model_of(provider, server.url, provider == "anthropic"))
        assert len(server.bodies()) == 3, out
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out


# -- held: a tool the run offers, named otherwise; input JSON that never closes --------------------

NAMED_OTHERWISE = ("erp__read_order", "Read_Order", "read_order ", "r\u0435ad_order")  # Cyrillic е


def unclosed_input(items: list[Any]) -> list[Any]:
    """An Anthropic stream whose ``partial_json`` never closes the object before
    ``content_block_stop`` (each piece without its ``}``)."""
    for event in items:
        delta = event.get("delta") if isinstance(event, dict) else None
        if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            delta["partial_json"] = delta["partial_json"].replace("}", "")
    return items


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_tool_named_otherwise_and_input_that_never_closes_are_refused_never_run(
    tmp_path: Path, provider: str
) -> None:
    """Held: a call naming the offered ``read_order`` namespaced, in another case, with a
    trailing space or with a Cyrillic letter is refused (never run as ``read_order``), whole and
    streamed, on every protocol, the model's next answer accepted; an Anthropic stream's input
    that never closes is refused as malformed arguments, not run."""
    cases = [(name, stream, None) for name in NAMED_OTHERWISE for stream in (False, True)]
    if provider == "anthropic":
        cases.append(("read_order", True, unclosed_input))
    for name, stream, edit in cases:
        replies = [Reply.calls((name, ORDER[1]), edit=edit), Reply.text(ANSWER)]
        with SERVERS[provider](scripted(replies)) as server:
            code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
            (sent,) = results_sent(server.bodies()[1])
        assert (out["stop_reason"], out["answer"], code != 0) == ("accepted", ANSWER, True), (name, out)
        assert [c["status"] for c in out["calls"]] == ["rejected"], (name, out)
        assert '"status": "open"' not in sent, (name, sent)
