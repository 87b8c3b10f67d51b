"""The malicious-server suite (X2–X5): each attack is blocked, and in the same test the
legitimate tool of the same server still works. The model stand-in obeys every attack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.core.messages import AssistantMessage
from tether.core.stop import StopReason
from tether.mcp._approve import approve_server
from tether.mcp._elicitation import Answer, ScriptedResponder
from tether.mcp._sampling import SamplingPrompt
from tether.mcphost._runner import resume_pause, run_question
from tether.models._base import ModelRequest
from tether.testing import FunctionModel
from tether.trace._tracer import read_trace

from .conftest import approve, approve_all, script, stdio_server, web_server, write_config

pytestmark = pytest.mark.anyio

READS = {"lookup": "read", "fetch_note": "read", "injected_note": "read", "big": "read", "bad_struct": "read"}
LOOKUP = ("h__lookup", {"key": "alpha"})
LOOKUP_ONLY = {"lookup": "read"}


def events(run: Any, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in run.result.events if str(e.kind) == kind]


def calls_logged(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.mark.spec("X2")
async def test_injected_instruction_in_a_result_never_reaches_the_server(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("HOSTILE_LOG", str(log))
    h = web_server("h", http_url, effects=READS)
    other = web_server("other", http_url, tools=["wipe"])  # wipe: effect undeclared
    config = write_config(tmp_path, [h, other])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__injected_note", {}), LOOKUP))
    # The obeying model proposed other__wipe; the host denied it (undeclared = side-effecting).
    denied = events(run, "policy_denied")
    assert [d["tool"] for d in denied] == ["other__wipe"]
    assert "wipe" not in calls_logged(log)
    # The injected text reached the model only as labelled, untrusted data.
    assert 'trust="untrusted"' in run.seen("h__injected_note")[0]
    assert "value-of-alpha" in run.seen("h__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.spec("X2")
@pytest.mark.parametrize(
    ("mode", "recheck"), [("auto", "each_call"), ("legacy", "on_change"), ("auto", "on_change")]
)
async def test_description_changed_after_approval_is_blocked_until_reapproved(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch, mode: str, recheck: str
) -> None:
    # each_call: the listing is re-checked before every call; on_change: after list_changed
    # (legacy), or after the change event on the listen stream the host opens (2026-07-28).
    monkeypatch.setenv("HOSTILE_RUGPULL", "1")
    config = write_config(tmp_path, [web_server("h", http_url, effects=READS, mode=mode, recheck=recheck)])
    await approve_all(config)
    run = await run_question(
        config,
        "Q",
        script(
            ("h__fetch_note", {}),
            LOOKUP,
            ("h__fetch_note", {}),
            ("h__lookup", {"key": "beta"}),
            ("h__fetch_note", {}),
        ),
    )
    first, second, third = run.seen("h__fetch_note")
    assert "all good" in first
    # Found changed during the call's re-check, then denied at the gate before reaching the server.
    assert "capability_blocked" in second and "all good" not in second
    assert "tool_definition_not_approved" in third
    assert [d["rule"] for d in events(run, "policy_denied")] == ["capability_pin"]
    blocked = [b for b in events(run, "mcp_capability_blocked") if b["status"] == "changed"]
    assert [b["tool"] for b in blocked] == ["h__fetch_note"]
    assert "description" in blocked[0]["why"]
    if recheck == "on_change":
        triggers = [e["trigger"] for e in events(run, "mcp_capability_check")]
        assert triggers == (["list_changed"] if mode == "legacy" else ["listen_opened", "list_changed"])
    # The model only ever saw the approved definition.
    tools = {t["function"]["name"]: t["function"] for t in run.model.requests[-1].tools}
    assert tools["h__fetch_note"]["description"] == "Reads the current note."
    looked = run.seen("h__lookup")
    assert "value-of-alpha" in looked[0] and "value-of-beta" in looked[1]
    # Until re-approved: the new text is flagged, so only an explicit acceptance pins it.
    _, _, skipped = await approve_server(config, "h", actor="ops")
    assert "flagged" in skipped["fetch_note"]
    await approve_server(config, "h", actor="ops", accept_flagged={"fetch_note"})
    again = await run_question(config, "Q", script(("h__fetch_note", {})))
    assert "all good" in again.seen("h__fetch_note")[0]


@pytest.mark.spec("X2")
async def test_colliding_and_impersonating_names_stay_apart(tmp_path: Path, http_url: str) -> None:
    a = web_server("a", http_url, effects={"lookup": "read"})
    b = web_server("b", http_url, effects={"lookup": "read"})
    config = write_config(tmp_path, [a, b])
    await approve_all(config)
    run = await run_question(
        config,
        "Q",
        script(
            ("lookup", {"key": "x"}), ("erp__read_order", {"order_id": "742"}), ("b__lookup", {"key": "y"})
        ),
    )
    offered = run.offered()
    assert "a__lookup" in offered and "b__lookup" in offered
    assert not any("erp__read_order" in name for name in offered)  # '__' in a server's tool name: blocked
    bare, impersonated = run.seen("lookup"), run.seen("erp__read_order")
    assert "unknown tool" in bare[0] and "unknown tool" in impersonated[0]
    assert "value-of-y" in run.seen("b__lookup")[0]
    assert offered == sorted(offered)  # fixed, deterministic order


@pytest.mark.spec("X2")
async def test_poisoned_description_is_never_offered_or_called(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("HOSTILE_LOG", str(log))
    config = write_config(tmp_path, [web_server("h", http_url, effects={**READS, "add_comment": "write"})])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__add_comment", {"comment": "k"}), LOOKUP))
    assert "h__add_comment" not in run.offered()
    assert all("id_rsa" not in str(t) for t in run.model.requests[0].tools)
    assert "unknown tool" in run.seen("h__add_comment")[0]
    assert any(b["tool"] == "h__add_comment" for b in events(run, "mcp_capability_blocked"))
    assert calls_logged(log) == ["lookup"]
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.spec("X2")
async def test_oversized_result_is_cut_and_the_rest_never_enters_context(
    tmp_path: Path, http_url: str
) -> None:
    config = write_config(tmp_path, [web_server("h", http_url, effects=READS, max_result_chars=2000)])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__big", {}), LOOKUP))
    shown = run.seen("h__big")[0]
    assert "[TRUNCATED by host: 100011 characters" in shown and "kept out of context" in shown
    assert all("SECRET-TAIL" not in str(m) for r in run.model.requests for m in r.messages)
    assert len(shown) < 2300
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.spec("X2")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_structured_content_breaking_its_output_schema_is_rejected(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    config = write_config(tmp_path, [web_server("h", http_url, effects=READS, mode=mode)])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__bad_struct", {}), LOOKUP))
    shown = run.seen("h__bad_struct")[0]
    assert "invalid_output" in shown and "many" not in shown
    assert events(run, "mcp_result_rejected")[0]["reason"] == "output_schema"
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.spec("X2")
async def test_resource_links_and_remote_schema_refs_are_never_fetched(
    tmp_path: Path, http_url_with_links: str, hit_counter: tuple[str, list[str]]
) -> None:
    url, hits = hit_counter
    effects = {**READS, "link": "read", "remote_ref": "read"}
    config = write_config(tmp_path, [web_server("h", http_url_with_links, effects=effects)])
    _, _, skipped = await approve_server(config, "h", actor="ops")
    assert "remote_ref" in skipped  # flagged at review: its schema lives elsewhere
    await approve_server(config, "h", actor="ops", accept_flagged={"remote_ref"}, only={"remote_ref"})
    run = await run_question(config, "Q", script(("h__link", {}), ("h__remote_ref", {"x": "v"}), LOOKUP))
    assert f"[resource_link not fetched: {url}" in run.seen("h__link")[0]
    refused = run.seen("h__remote_ref")[0]  # cannot be validated, so never sent (intake or the source)
    assert "unsupported_schema" in refused and "never fetched" in refused
    assert hits == []
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.spec("X2")
async def test_annotations_are_hints_and_the_declared_effect_wins(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("HOSTILE_LOG", str(log))
    # read_secretly says readOnlyHint=true; the host declared nothing for it: side-effecting.
    config = write_config(tmp_path, [web_server("h", http_url, effects=READS)])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__read_secretly", {"key": "k"}), LOOKUP))
    denied = events(run, "policy_denied")
    assert denied[0]["tool"] == "h__read_secretly" and denied[0]["details"]["effect"] == "write"
    assert calls_logged(log) == ["lookup"]
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.slow  # a subprocess that dies
@pytest.mark.spec("X2")
async def test_a_dying_server_is_unavailable_while_the_other_keeps_working(
    tmp_path: Path, approved_pins: Path, http_url: str
) -> None:
    a = stdio_server("a", effects={"die": "read", "lookup": "read"})
    b = web_server("b", http_url, effects={"lookup": "read", "slow": "read"}, timeout_s=1.5)
    config = write_config(tmp_path, [a, b], pins_from=approved_pins)
    await approve(config, "b")
    run = await run_question(
        config, "Q", script(("a__die", {}), ("b__slow", {}), ("b__lookup", {"key": "z"}))
    )
    assert "dependency_unavailable" in run.seen("a__die")[0]
    assert "dependency_unavailable" in run.seen("b__slow")[0] and "timed out" in run.seen("b__slow")[0]
    assert "value-of-z" in run.seen("b__lookup")[0]  # same server as the timeout, still serving
    assert run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.spec("X5")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_nested_and_credential_shaped_questions_are_refused_without_asking(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    effects = {"ask_nested": "read", "ask_password": "read", "ask_colour": "read"}
    config = write_config(
        tmp_path, [web_server("h", http_url, mode=mode, effects=effects, elicitation={"enabled": True})]
    )
    await approve_all(config)
    person = ScriptedResponder([Answer("accept", {"colour": "red"})])
    run = await run_question(
        config,
        "Q",
        script(("h__ask_nested", {}), ("h__ask_password", {}), ("h__ask_colour", {})),
        responder=person,
    )
    assert "action=decline" in run.seen("h__ask_nested")[0]
    assert "action=decline" in run.seen("h__ask_password")[0]
    assert [p.message for p in person.shown] == ["Which colour?"]  # the person saw only the legitimate one
    reasons = [e["reason"] for e in events(run, "mcp_elicitation") if e["outcome"] == "refused"]
    assert reasons[0].startswith("schema_not_flat") and reasons[1].startswith("credential_shaped")
    assert "content={'colour': 'red'}" in run.seen("h__ask_colour")[0]


@pytest.mark.spec("X5")
async def test_invalid_answers_are_asked_again_and_never_passed_on(tmp_path: Path, http_url: str) -> None:
    config = write_config(
        tmp_path, [web_server("h", http_url, effects={"ask_colour": "read"}, elicitation={"enabled": True})]
    )
    await approve_all(config)
    person = ScriptedResponder(
        [Answer("accept", {"colour": "green"}), Answer("accept", {"colour": "red", "x": 1})]
    )
    person.answers.append(Answer("accept", {"colour": "blue"}))
    run = await run_question(config, "Q", script(("h__ask_colour", {})), responder=person)
    assert len(person.shown) == 3
    assert "content={'colour': 'blue'}" in run.seen("h__ask_colour")[0]


@pytest.mark.spec("X5")
async def test_url_mode_without_a_person_is_declined_and_a_form_question_pauses_durably(
    tmp_path: Path, http_url: str
) -> None:
    elicitation = {"enabled": True, "url_mode": True}
    effects = {"ask_url": "read", "ask_colour": "read"}
    config = write_config(tmp_path, [web_server("h", http_url, effects=effects, elicitation=elicitation)])
    await approve_all(config)
    run = await run_question(config, "Q", script(("h__ask_url", {}), ("h__ask_colour", {})), responder=None)
    assert "action=decline" in run.seen("h__ask_url")[0]
    url_events = [e for e in events(run, "mcp_elicitation") if "url" in e]
    assert url_events[0]["outcome"] == "declined" and "interactive person" in url_events[0]["reason"]
    # The form question paused the run; nobody was asked, nothing was guessed.
    assert run.result.stop_reason is StopReason.APPROVAL_REQUIRED
    pause_id = next(e["pause_id"] for e in events(run, "mcp_elicitation") if e["outcome"] == "paused")
    # An invalid answer is refused and loses nothing; a valid one continues the paused call.
    from tether.errors import ApprovalError

    with pytest.raises(ApprovalError, match="colour"):
        await resume_pause(config, pause_id, "accept", {"colour": "green"}, actor="ops")
    out = await resume_pause(config, pause_id, "accept", {"colour": "red"}, actor="ops")
    assert out["status"] == "ok" and "content={'colour': 'red'}" in out["result"]
    with pytest.raises(ApprovalError, match="not pending"):
        await resume_pause(config, pause_id, "accept", {"colour": "red"}, actor="ops")


@pytest.mark.spec("X5")
async def test_url_mode_needs_the_person_to_consent_after_seeing_url_and_domain(
    tmp_path: Path, http_url: str
) -> None:
    elicitation = {"enabled": True, "url_mode": True}
    config = write_config(
        tmp_path,
        [web_server("h", http_url, effects={"ask_url": "read", "lookup": "read"}, elicitation=elicitation)],
    )
    await approve_all(config)
    refuses = ScriptedResponder(url_consent=False)
    run = await run_question(config, "Q", script(("h__ask_url", {}), LOOKUP), responder=refuses)
    assert "action=decline" in run.seen("h__ask_url")[0]
    shown = refuses.shown[0]
    assert shown.url == "https://login.example.net/oauth?x=1" and shown.domain == "login.example.net"
    assert "login.example.net" in shown.render()
    assert "value-of-alpha" in run.seen("h__lookup")[0]


def _sampler() -> FunctionModel:
    def answer(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage(content="a short summary")

    return FunctionModel(answer, name="sampler")


@pytest.mark.spec("X3")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_sampling_needs_opt_in_consent_and_stops_at_its_own_budget(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    effects = {"summarize": "read", "lookup": "read", "flood": "read", "peek": "read"}
    off = web_server("a", http_url, mode=mode, effects=effects)
    on = web_server(
        "b",
        http_url,
        mode=mode,
        effects=effects,
        sampling={"enabled": True, "max_calls": 2, "max_calls_per_call": 1, "max_tokens": 64},
    )
    config = write_config(tmp_path, [off, on])
    await approve_all(config)
    seen: list[SamplingPrompt] = []

    def consent(prompt: SamplingPrompt) -> bool:
        seen.append(prompt)
        return True

    sampler = _sampler()
    run = await run_question(
        config,
        "The secret objective",
        script(
            ("a__summarize", {"text": "x"}),
            ("b__flood", {}),
            ("b__peek", {}),
            ("b__summarize", {"text": "hello"}),
            ("b__summarize", {"text": "again"}),
            ("b__lookup", {"key": "q"}),
        ),
        sampling_model=sampler,
        sampling_consent=consent,
    )
    # Not enabled: not even advertised, so a 2025 server's request is answered Method not found
    # (the host has no such method); on 2026-07-28 the SDK refuses the call's input request.
    said = {"auto": "Sampling not supported", "legacy": "sampling failed: Method not found"}[mode]
    assert said in run.seen("a__summarize")[0]
    # The flooding call got one answer; its other requests were refused (the per-call cap). A
    # 2025 server hears each refusal; on 2026-07-28 a refused input request ends the call.
    flood = run.seen("b__flood")[0]
    if mode == "legacy":
        assert flood.count("sample: a short summary") == 1 and flood.count("one tool call") == 3
    else:
        assert "host refused the server's sampling request" in flood and "one tool call" in flood
    # … its system prompt was shown to the person as dropped and never reached the model …
    assert seen[0].system_prompt and "Reveal the whole conversation" in seen[0].system_prompt
    assert all("Reveal" not in str(r.messages) for r in sampler.requests)
    # … a request for the conversation (includeContext) was refused before anyone was asked …
    assert "includeContext 'allServers' refused" in run.seen("b__peek")[0]
    # … and the honest tool still samples afterwards, until the server's own budget is spent.
    first, second = run.seen("b__summarize")
    assert "summary: a short summary" in first
    assert "budget exhausted" in second and "2/2 calls" in second
    assert seen[1].messages == (("user", "Summarise: hello"),) and seen[1].max_tokens == 64
    # The sampler got only the server's text, never the agent's conversation, never tools.
    assert all("secret objective" not in str(r.messages) and r.tools == () for r in sampler.requests)
    assert "value-of-q" in run.seen("b__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED
    outcomes = [e["outcome"] for e in events(run, "mcp_sampling")]
    assert outcomes == ["answered", "refused", "refused", "refused", "refused", "answered", "refused"]
    assert len(sampler.requests) == 2  # one from the flood, one from the honest tool


@pytest.mark.slow  # a subprocess (its environment is the point)
@pytest.mark.spec("X2")
async def test_credentials_reach_only_their_server_and_never_the_trace(
    tmp_path: Path, approved_pins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HOSTILE_TOKEN", "tok-9f8e7d6c5b4a")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-should-stay-home")
    h = stdio_server(
        "h",
        effects={"whoami": "read", "lookup": "read"},
        credentials={"HOSTILE_TOKEN": "env:MY_HOSTILE_TOKEN"},
    )
    config = write_config(tmp_path, [h], pins_from=approved_pins)
    run = await run_question(config, "Q", script(("h__whoami", {}), LOOKUP))
    assert "token=tok-9f8e7d6c5b4a provider_key=absent" in run.seen("h__whoami")[0]
    trace_text = Path(run.result.trace_path).read_text()  # type: ignore[arg-type]
    assert "tok-9f8e7d6c5b4a" not in trace_text and "[REDACTED]" in trace_text
    launch = next(e for e in read_trace(run.result.trace_path) if e["kind"] == "server_launch")  # type: ignore[arg-type]
    assert launch["env_keys"] == ["HOSTILE_TOKEN"]
    assert "value-of-alpha" in run.seen("h__lookup")[0]


@pytest.mark.spec("X1")
async def test_a_server_that_cannot_start_is_unavailable_and_the_others_still_serve(
    tmp_path: Path, http_url: str
) -> None:
    import sys

    broken = {
        "name": "broken",
        "transport": "stdio",
        "command": [sys.executable, "-c", "raise SystemExit(3)"],
    }
    config = write_config(tmp_path, [broken, web_server("h", http_url, effects={"lookup": "read"})])
    await approve(config, "h")
    run = await run_question(config, "Q", script(LOOKUP))
    assert "broken" in run.summary()["unavailable_servers"]
    failed = [e for e in events(run, "server_launch") if e.get("state") == "failed"]
    assert failed[0]["source"] == "broken" and "could not be started" in failed[0]["error"]
    assert "value-of-alpha" in run.seen("h__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.spec("X5")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_server_cannot_ask_more_than_its_share_of_questions_in_one_call(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    effects = {"ask_many": "read", "ask_colour": "read"}
    config = write_config(
        tmp_path, [web_server("h", http_url, mode=mode, effects=effects, elicitation={"enabled": True})]
    )
    await approve_all(config)
    person = ScriptedResponder(
        [Answer("accept", {"n": i}) for i in range(3)] + [Answer("accept", {"colour": "red"})]
    )
    run = await run_question(
        config, "Q", script(("h__ask_many", {}), ("h__ask_colour", {})), responder=person
    )
    actions = run.seen("h__ask_many")[0].splitlines()[1].split()
    assert sorted(actions) == ["accept", "accept", "accept", "decline"]
    refused = [e for e in events(run, "mcp_elicitation") if e["outcome"] == "refused"]
    assert len(refused) == 1 and "more than 3 questions" in refused[0]["reason"]
    assert "content={'colour': 'red'}" in run.seen("h__ask_colour")[0]  # a new call: a new share


@pytest.mark.spec("X2", "T5")
async def test_with_an_approval_desk_an_undeclared_tool_waits_for_a_person(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.policy import Approvals, SqliteApprovalStore

    log = tmp_path / "calls.log"
    monkeypatch.setenv("HOSTILE_LOG", str(log))
    config = write_config(tmp_path, [web_server("h", http_url, effects={"lookup": "read"})])
    await approve_all(config)
    store = SqliteApprovalStore(tmp_path / "approvals.db")
    run = await run_question(
        config, "Q", script(LOOKUP, ("h__read_secretly", {"key": "k"})), approvals=Approvals(store)
    )
    # readOnlyHint=true is only a hint: undeclared means side-effecting, so a person must approve.
    assert run.result.stop_reason is StopReason.APPROVAL_REQUIRED
    [pending] = await store.list_proposals(run_id=run.result.run_id)
    assert (pending.tool, pending.effect, str(pending.status)) == ("h__read_secretly", "write", "pending")
    assert calls_logged(log) == ["lookup"]
    assert "value-of-alpha" in run.seen("h__lookup")[0]
    store.close()


@pytest.mark.spec("X2")
async def test_a_tool_the_config_never_offers_is_blocked_without_a_trace_row_of_its_own(
    tmp_path: Path, approved_pins: Path
) -> None:
    # The server lists some thirty tools; the config offers two, one of them never approved.
    server = stdio_server("h", tools=["lookup", "add_comment"], effects=LOOKUP_ONLY)
    config = write_config(tmp_path, [server], pins_from=approved_pins)
    run = await run_question(config, "Q", script(("h__wipe", {}), LOOKUP))
    # One row per decision of the pin check: the offered tool that is not approved. The tools
    # outside the config's list are the config's decision, not traced one by one per launch.
    assert [b["tool"] for b in events(run, "mcp_capability_blocked")] == ["h__add_comment"]
    assert "unknown tool" in run.seen("h__wipe")[0]  # still refused
    assert run.offered() == ["h__lookup"] and "value-of-alpha" in run.seen("h__lookup")[0]
