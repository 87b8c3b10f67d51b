"""A person's answer to a paused question is checked and audited the same way whichever entry
point takes it (``mcp._answers.answer_question``): ``tether runs answer``, ``tether mcp resume
--answer-only`` and the console. A refused answer (out of its choices, already answered) changes
nothing but its refusal's audit entry, alike everywhere. Real parts: the SQLite pause store and
the console's users database; each entry point is given stores on them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether.cli._commands import runs as runs_cmd
from tether.cli._commands._audit import CliAudit
from tether.cli._main import build_parser
from tether.console import _elicitations as console_answers
from tether.console._users import Principal, UserStore
from tether.errors import ApprovalError
from tether.mcp._pauses import PauseStore
from tether.mcphost._runner import answer_pause
from tether.sql._database import blocking

TENANT = "shop-a"
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}},
    "required": ["colour"],
}
ENTRY_POINTS = ["runs", "mcp", "console"]


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """One pending question of a run of ``TENANT``, and the console's users database."""
    monkeypatch.setenv("TETHER_OUT", str(tmp_path))
    pauses = PauseStore(tmp_path / "pauses.db")
    users = UserStore(tmp_path / "console.db")
    question = blocking(
        pauses.create,
        run_id="run-1",
        server="paint",
        tool="paint",
        arguments={},
        message="Colour?",
        schema=SCHEMA,
    )
    try:
        yield SimpleNamespace(tmp=tmp_path, pauses=pauses, users=users, pid=question.id)
    finally:
        pauses.close()
        users.close()


def _answer(where: str, q: SimpleNamespace, content: dict[str, Any]) -> Any:
    """Accept ``content`` for ``q.pid`` through entry point ``where``, as ``ana``."""
    if where == "runs":
        args = build_parser().parse_args(
            ["runs", "answer", q.pid, "--answer", json.dumps(content), "--by", "ana", "--json"]
        )
        client = SimpleNamespace(
            stores=SimpleNamespace(pauses=q.pauses), run=lambda run_id: SimpleNamespace(tenant=TENANT)
        )
        return runs_cmd._answer(client, args)
    if where == "mcp":  # `tether mcp resume --answer-only` on a host of TENANT, the run's own
        host = SimpleNamespace(state="pauses.db", trace_dir="traces", tenant=TENANT)
        config = SimpleNamespace(host=host, path=lambda name: q.tmp / name)
        audit = CliAudit()
        return blocking(
            answer_pause, config, q.pid, "accept", content, actor="ana", audit=audit, audited_as="cli:ana"
        )

    async def owner(run_id: str) -> tuple[bool, str]:
        return True, TENANT

    async def pins(server: str) -> dict[str, Any]:
        return {}

    sources = SimpleNamespace(
        open_pauses=lambda: PauseStore(q.tmp / "pauses.db"), run_owner=owner, pins=pins, users=q.users
    )
    who = Principal("ana", {TENANT: "reviewer"})
    return blocking(console_answers.answer, sources, who, q.pid, "accept", content)  # type: ignore[arg-type]


def _entries(q: SimpleNamespace) -> list[tuple[str, ...]]:
    return [(e.action, e.tenant, e.target, e.outcome, e.detail.split("; ")[-1]) for e in q.users.audit_log()]


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_an_answer_is_audited_alike_from_every_entry_point(where: str, asked: SimpleNamespace) -> None:
    _answer(where, asked, {"colour": "red"})
    assert _entries(asked) == [("elicitation_accept", TENANT, asked.pid, "answered", "fields: colour")]
    stored = blocking(asked.pauses.get, asked.pid)
    assert (stored.status, stored.answer) == ("answered", {"colour": "red"})


def _refused(where: str, q: SimpleNamespace, content: dict[str, Any]) -> None:
    """Each entry point raises the refusal (``tether runs`` answers it with exit 1)."""
    with pytest.raises(ApprovalError):
        _answer(where, q, content)


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_an_answer_out_of_its_choices_is_refused_alike_and_stores_nothing(
    where: str, asked: SimpleNamespace
) -> None:
    _refused(where, asked, {"colour": "green"})
    [(action, tenant, target, outcome, _)] = _entries(asked)
    assert (action, tenant, target, outcome) == (
        "elicitation_accept",
        TENANT,
        asked.pid,
        "refused:invalid_answer",
    )
    assert blocking(asked.pauses.get, asked.pid).status == "pending"


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_an_answered_question_is_not_answered_again(where: str, asked: SimpleNamespace) -> None:
    blocking(asked.pauses.answer, asked.pid, "accept", {"colour": "blue"}, actor="rita")
    _refused(where, asked, {"colour": "red"})
    [(action, tenant, target, outcome, _)] = _entries(asked)
    assert (action, tenant, target, outcome) == (
        "elicitation_accept",
        TENANT,
        asked.pid,
        "refused:not_pending",
    )
    stored = blocking(asked.pauses.get, asked.pid)
    assert (stored.answer, stored.answered_by) == ({"colour": "blue"}, "rita")
