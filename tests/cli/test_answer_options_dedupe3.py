"""A person answers a paused question the same way from ``tether runs answer`` and ``tether mcp
resume``: one set of options, read by one function (``_options.answer_of``)."""

from __future__ import annotations

import pytest

from tether.cli._commands._options import answer_of
from tether.cli._main import UsageError, build_parser
from tether.errors import ApprovalError

COMMANDS = [("runs", "answer", "q-1"), ("mcp", "resume", "q-1", "--config", "mcp.json")]


@pytest.mark.parametrize("command", COMMANDS)
def test_both_commands_read_an_answer_a_decline_and_a_cancel_alike(command: tuple[str, ...]) -> None:
    parser = build_parser()
    answered = parser.parse_args([*command, "--answer", '{"colour": "red"}', "--by", "ana"])
    assert answer_of(answered) == ("accept", {"colour": "red"}) and answered.by == "ana"
    assert answer_of(parser.parse_args([*command, "--decline"])) == ("decline", None)
    assert answer_of(parser.parse_args([*command, "--cancel"])) == ("cancel", None)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("given", ["not json", "[1]", '"red"', "null"])
def test_an_answer_that_is_no_json_object_is_refused_by_both(command: tuple[str, ...], given: str) -> None:
    args = build_parser().parse_args([*command, "--answer", given])
    with pytest.raises(ApprovalError) as refused:
        answer_of(args)
    assert refused.value.reason == "invalid_answer"


@pytest.mark.parametrize("command", COMMANDS)
def test_one_way_of_answering_at_a_time(command: tuple[str, ...]) -> None:
    with pytest.raises(UsageError, match="not allowed with argument"):
        build_parser().parse_args([*command, "--answer", "{}", "--decline"])
