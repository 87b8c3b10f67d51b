"""Strict proposal intake (T3) and ownership at intake (T4): every refusal is a PolicyError with a
machine-readable reason, and the legitimate proposal is accepted in the same tests."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from tether.errors import PolicyError
from tether.policy import (
    MAX_PROPOSAL_BYTES,
    DictCatalog,
    Policy,
    Proposal,
    TrustedContext,
    check_arguments,
    parse_arguments,
    propose,
)
from tether.tools import Effect, Target, ToolSpec, tool

ALPHA = TrustedContext(tenant="org-alpha")


@tool(effect=Effect.WRITE, target=Target("lead_id", "lead"))
def prepare_draft(
    lead_id: Annotated[str, Field(min_length=1, max_length=80, description="Lead id.")],
    body: Annotated[str, Field(min_length=1, max_length=2000, description="Draft text.")],
) -> dict[str, str]:
    """Prepare a draft."""
    return {"lead_id": lead_id}


@tool
def set_count(
    count: Annotated[int, Field(ge=0, le=100, description="How many.")],
    ratio: Annotated[float, Field(description="A ratio.")] = 0.5,
    urgent: Annotated[bool, Field(description="Urgent?")] = False,
    tags: Annotated[list[str] | None, Field(max_length=3, description="Tags.")] = None,
) -> int:
    """Set a count."""
    return count


TOOLS = [prepare_draft, set_count]
CATALOG = DictCatalog({"lead": {"lead-alpha": "org-alpha", "lead-beta": "org-beta"}})
POLICY = Policy(allow={"prepare_draft", "set_count"}, catalog=CATALOG)


def envelope(tool_name: str = "prepare_draft", **arguments: Any) -> str:
    if not arguments and tool_name == "prepare_draft":
        arguments = {"lead_id": "lead-alpha", "body": "Synthetic text for review."}
    return json.dumps({"tool": tool_name, "arguments": arguments})


def reason_of(raw: str | bytes) -> str:
    with pytest.raises(PolicyError) as info:
        propose(ALPHA, raw, tools=TOOLS, policy=POLICY)
    return info.value.reason


@pytest.mark.spec("T3")
def test_valid_proposal_is_accepted_with_a_content_hash_and_exact_arguments() -> None:
    p = propose(ALPHA, envelope(), tools=TOOLS, policy=POLICY)
    assert isinstance(p, Proposal)
    assert (p.tool, p.tenant, p.needs_approval) == ("prepare_draft", "org-alpha", True)
    assert p.arguments == {"lead_id": "lead-alpha", "body": "Synthetic text for review."}
    assert p.content_hash.startswith("sha256:")
    same = propose(ALPHA, envelope(), tools=TOOLS, policy=POLICY)
    assert same.content_hash == p.content_hash
    p.arguments["body"] = "changed"  # a copy: the proposal itself cannot be edited
    assert p.arguments["body"] == "Synthetic text for review."


LEAD = '"lead_id": "lead-alpha"'
BODY = '"body": "ok"'


@pytest.mark.spec("T3")
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            '{"tool": "prepare_draft", "tool": "x", "arguments": {' + LEAD + ", " + BODY + "}}",
            "duplicate_key",
        ),
        (
            '{"tool": "prepare_draft", "arguments": {' + LEAD + ', "lead_id": "lead-beta", ' + BODY + "}}",
            "duplicate_key",
        ),
        ('{"tool": "set_count", "arguments": {"count": 1, "tags": ["a"], "tags": ["b"]}}', "duplicate_key"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ", " + BODY + '}, "extra": 1}', "extra_field"),
        (
            '{"tool": "prepare_draft", "arguments": {' + LEAD + ", " + BODY + ', "tenant": "org-beta"}}',
            "extra_field",
        ),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + "}}", "missing_field"),
        ('{"arguments": {' + LEAD + ", " + BODY + "}}", "missing_field"),
        ('{"tool": "set_count", "arguments": {"count": NaN}}', "non_standard_json"),
        ('{"tool": "set_count", "arguments": {"count": Infinity}}', "non_standard_json"),
        ('{"tool": "set_count", "arguments": {"count": -Infinity}}', "non_standard_json"),
        ('{"tool": "set_count", "arguments": {"count": 1, "ratio": 1e400}}', "number_overflow"),
        ('{"tool": "set_count", "arguments": {"count": 99999999999999999999999}}', "number_overflow"),
        ('{"tool": "set_count", "arguments": {"count": "1"}}', "wrong_type"),
        ('{"tool": "set_count", "arguments": {"count": true}}', "wrong_type"),
        ('{"tool": "set_count", "arguments": {"count": 1.0}}', "wrong_type"),
        ('{"tool": "set_count", "arguments": {"count": 1, "urgent": 1}}', "wrong_type"),
        ('{"tool": "prepare_draft", "arguments": {"lead_id": 7, ' + BODY + "}}", "wrong_type"),
        ('{"tool": 1, "arguments": {}}', "wrong_type"),
        ('{"tool": "prepare_draft", "arguments": []}', "not_an_object"),
        ('["prepare_draft", {}]', "not_an_object"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ', "body": ""}}', "blank_string"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ', "body": " \\t\\n "}}', "blank_string"),
        ('{"tool": "  ", "arguments": {}}', "blank_string"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ', "body": "a\\ud800b"}}', "not_utf8"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ", " + BODY + ', "\\udfff": 1}}', "not_utf8"),
        ('{"tool": "prepare_draft", "arguments": {"lead_id": "' + "x" * 81 + '", ' + BODY + "}}", "too_long"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ', "body": "' + "b" * 2001 + '"}}', "too_long"),
        ('{"tool": "set_count", "arguments": {"count": 101}}', "out_of_range"),
        ('{"tool": "set_count", "arguments": {"count": 1, "tags": ["a", "b", "c", "d"]}}', "out_of_range"),
        ('{"tool": "send_message", "arguments": {}}', "unknown_tool"),
        ('{"tool": "prepare_draft", "arguments": {"lead_id": "lead-beta", ' + BODY + "}}", "cross_tenant"),
        ('{"tool": "prepare_draft", "arguments": {"lead_id": "lead-gamma", ' + BODY + "}}", "target_unknown"),
        ('{"tool": "prepare_draft", "arguments": {' + LEAD + ", " + BODY + "}", "invalid_json"),
        ("", "invalid_json"),
        ("\ufeff" + envelope(), "bom"),
        ('{"tool": "set_count", "arguments": {"count": 1, "tags": ' + "[" * 40 + "]" * 40 + "}}", "too_deep"),
        ("[" * 2040 + "]" * 2040, "too_deep"),  # deep enough to exhaust a recursive parser
        ("[" * 5000 + "]" * 5000, "too_large"),
    ],
)
def test_malformed_proposals_are_refused_with_a_precise_reason(raw: str, reason: str) -> None:
    assert reason_of(raw) == reason
    # The legitimate proposal still passes through the same intake.
    assert propose(ALPHA, envelope(), tools=TOOLS, policy=POLICY).tool == "prepare_draft"


@pytest.mark.spec("T3")
def test_size_is_measured_in_utf8_bytes_before_parsing() -> None:
    base = json.loads(envelope())
    base["arguments"]["body"] = ""
    room = MAX_PROPOSAL_BYTES - len(json.dumps(base, ensure_ascii=False).encode())
    # "é" is one character but two UTF-8 bytes: the limit counts bytes.
    fits = dict(base, arguments={"lead_id": "lead-alpha", "body": "é" * (room // 2)})
    text = json.dumps(fits, ensure_ascii=False)
    assert len(text.encode()) <= MAX_PROPOSAL_BYTES
    with pytest.raises(PolicyError) as info:  # under 4096 bytes but over the body's 2000 characters
        propose(ALPHA, text, tools=TOOLS, policy=POLICY)
    assert info.value.reason == "too_long"
    padded = envelope() + " " * (MAX_PROPOSAL_BYTES - len(envelope()))
    assert propose(ALPHA, padded, tools=TOOLS, policy=POLICY).tool == "prepare_draft"
    assert reason_of(padded + " ") == "too_large"


@pytest.mark.spec("T3")
def test_per_parameter_limits_come_from_the_tool_contract() -> None:
    at_limit = envelope(lead_id="l" * 80, body="b" * 2000)
    p = propose(ALPHA, at_limit, tools=TOOLS)  # no catalog here: only the contract applies
    assert len(p.arguments["body"]) == 2000
    assert prepare_draft.spec.parameters["properties"]["lead_id"]["maxLength"] == 80


@pytest.mark.spec("T3")
def test_bytes_must_be_strict_utf8_without_byte_order_mark() -> None:
    good = envelope().encode()
    assert propose(ALPHA, good, tools=TOOLS, policy=POLICY).tool == "prepare_draft"
    assert reason_of(b"\xef\xbb\xbf" + good) == "bom"
    assert reason_of(good.replace(b"Synthetic", b"Synth\xfftic")) == "not_utf8"
    assert reason_of(envelope().encode("utf-16")) == "not_utf8"  # json.loads would have guessed UTF-16
    assert reason_of(good[:-3] + b"\xed\xa0\x80" + good[-3:]) == "not_utf8"  # an encoded surrogate


@pytest.mark.spec("T3")
def test_non_ascii_text_is_kept_exactly_as_sent() -> None:
    body = "Olá, José — 日本語 ✓"
    p = propose(ALPHA, envelope(lead_id="lead-alpha", body=body), tools=TOOLS, policy=POLICY)
    assert p.arguments["body"] == body
    assert reason_of(envelope(lead_id="lead-alpha", body="\u2003")) == "blank_string"  # em space is space


@pytest.mark.spec("T3")
def test_mcp_style_schemas_without_additional_properties_still_refuse_extra_fields() -> None:
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "maxLength": 10}, "limit": {"type": "integer"}},
        "required": ["order_id"],
    }
    assert check_arguments(schema, {"order_id": "742"}) == {"order_id": "742"}
    for bad, reason in [
        ({"order_id": "742", "sql": "drop"}, "extra_field"),
        ({"order_id": "7" * 11}, "too_long"),
        ({"order_id": "742", "limit": "5"}, "wrong_type"),
        ({}, "missing_field"),
    ]:
        with pytest.raises(PolicyError) as info:
            check_arguments(schema, bad)
        assert info.value.reason == reason


@pytest.mark.spec("T3")
def test_parse_arguments_treats_empty_text_as_no_arguments_and_refuses_other_shapes() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    for raw, reason in [("[]", "not_an_object"), ("null", "not_an_object"), ("   ", "invalid_json")]:
        with pytest.raises(PolicyError) as info:
            parse_arguments(raw)
        assert info.value.reason == reason


def _outcome(raw: str | bytes) -> Proposal | PolicyError:
    try:
        return propose(ALPHA, raw, tools=TOOLS, policy=POLICY)
    except PolicyError as err:
        assert isinstance(err.reason, str) and err.reason
        return err


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.spec("T3")
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_give_a_proposal_or_a_policy_error_only(raw: bytes) -> None:
    _outcome(raw)
    _outcome(raw.decode("utf-8", errors="surrogateescape"))  # str with lone surrogates too


@pytest.mark.spec("T3")
@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["prepare_draft", "set_count", "other"]) | st.text(max_size=10),
    st.dictionaries(
        st.sampled_from(["lead_id", "body", "count", "ratio", "urgent", "tags"]) | st.text(max_size=6),
        json_values,
        max_size=5,
    ),
    json_values,
)
def test_arbitrary_json_gives_a_proposal_or_a_policy_error_only(
    name: str, arguments: dict[str, Any], anything: Any
) -> None:
    for doc in ({"tool": name, "arguments": arguments}, anything, {"tool": name, "arguments": anything}):
        raw = json.dumps(doc)  # NaN / Infinity appear here as the non-standard constants
        result = _outcome(raw)
        if isinstance(result, Proposal):
            assert result.tool in {"prepare_draft", "set_count"}
            assert set(result.arguments) <= {"lead_id", "body", "count", "ratio", "urgent", "tags"}


def test_tool_spec_without_properties_accepts_only_no_arguments() -> None:
    spec = ToolSpec("ping", "Ping.", {"type": "object", "properties": {}}, Effect.READ)
    assert propose(ALPHA, '{"tool": "ping", "arguments": {}}', tools=[spec]).arguments == {}
    with pytest.raises(PolicyError) as info:
        propose(ALPHA, '{"tool": "ping", "arguments": {"x": 1}}', tools=[spec])
    assert info.value.reason == "extra_field"


@pytest.mark.spec("T3")
@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["prepare_draft", "set_count"]), st.text(max_size=300) | st.binary(max_size=300).map(repr)
)
def test_the_gate_turns_any_raw_arguments_into_an_outcome_never_an_exception(name: str, raw: str) -> None:
    import anyio

    from tether.core.messages import ToolCall
    from tether.host import Host

    host = Host(policy=POLICY)
    host.add_tools(*TOOLS)
    anyio.run(host.start)
    outcome = host._gate(ToolCall("c1", name, raw), ALPHA, host.offered())
    assert outcome.status in {"allow", "reject", "deny"}  # no approval store here: "approve" fails closed
    if outcome.status == "reject":
        assert outcome.error.split(":")[0].replace("_", "").isalnum()
    valid = json.dumps({"lead_id": "lead-alpha", "body": "ok"})
    assert host._gate(ToolCall("c2", "prepare_draft", valid), ALPHA, host.offered()).decision.reason == (  # type: ignore[union-attr]
        "approval_unavailable"
    )


def test_strict_parsing_holds_in_many_threads_at_once() -> None:
    # Each thread keeps its own decoder (its hooks are Python code): parses running side by
    # side still refuse duplicate keys, NaN and overflowing numbers, and still return exactly
    # what was sent.
    from concurrent.futures import ThreadPoolExecutor

    from tether.policy._intake import parse_json

    def work(i: int) -> list[str]:
        seen = []
        for j in range(300):
            value = parse_json(json.dumps({"i": i, "j": j, "text": "é" * (j % 7), "n": [1.5, j]}))
            assert value == {"i": i, "j": j, "text": "é" * (j % 7), "n": [1.5, j]}
            for hostile in ('{"a": 1, "a": 2}', '{"a": NaN}', '{"a": 1e999}'):
                with pytest.raises(PolicyError) as caught:
                    parse_json(hostile)
                seen.append(caught.value.reason)
        return seen

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(8)))
    for seen in results:
        assert set(seen) == {"duplicate_key", "non_standard_json", "number_overflow"}, set(seen)
