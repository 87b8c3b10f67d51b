"""Durable pauses: an elicitation nobody could answer, kept until a person does.

A pause stores what was asked (server, tool, the exact call arguments, message, schema)
and, once answered through ``tether mcp resume``, the validated answer. Re-running the
paused call then finds the answer by the question's key and hands it to the server.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tether.errors import ApprovalError
from tether.mcp.pinning import connect_db, migrate

__all__ = ["Pause", "PauseStore", "question_key"]

PauseStatus = Literal["pending", "answered", "used", "completed"]

_MIGRATIONS = (
    (
        "001_elicitation_pauses",
        """
        CREATE TABLE elicitation_pauses (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            run_id TEXT NOT NULL,
            server TEXT NOT NULL,
            tool TEXT NOT NULL,
            arguments TEXT NOT NULL,
            message TEXT NOT NULL,
            schema TEXT NOT NULL,
            question_key TEXT NOT NULL,
            status TEXT NOT NULL,
            action TEXT,
            answer TEXT,
            answered_by TEXT,
            answered_at TEXT,
            outcome TEXT
        );
        CREATE INDEX elicitation_pauses_key ON elicitation_pauses (question_key, status)
        """,
    ),
)


def question_key(server: str, tool: str, arguments: Any, message: str, schema: Any) -> str:
    """The identity of one question asked during one call (same call, same question)."""
    blob = json.dumps([server, tool, arguments, message, schema], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Pause:
    id: str
    created_at: str
    run_id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    message: str
    schema: dict[str, Any]
    question_key: str
    status: PauseStatus
    action: str | None = None
    answer: dict[str, Any] | None = None
    answered_by: str | None = None
    outcome: str | None = None


class PauseStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = connect_db(self.path)
        migrate(self._db, _MIGRATIONS)

    def create(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        message: str,
        schema: dict[str, Any],
    ) -> Pause:
        """A new pending pause, or the run's one still pending for this very question (a resumed
        run asked again before anyone answered: one question, one pause)."""
        key = question_key(server, tool, arguments, message, schema)
        row = self._db.execute(
            "SELECT id FROM elicitation_pauses WHERE question_key = ? AND run_id = ? AND status = 'pending'",
            (key, run_id),
        ).fetchone()
        if row is not None:
            return self.get(row[0])
        pid = "elic-" + uuid.uuid4().hex[:12]
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self._db.execute(
            "INSERT INTO elicitation_pauses (id, created_at, run_id, server, tool, arguments, message, "
            "schema, question_key, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
            (pid, now, run_id, server, tool, json.dumps(arguments), message, json.dumps(schema), key),
        )
        return self.get(pid)

    def get(self, pause_id: str) -> Pause:
        row = self._db.execute(
            "SELECT id, created_at, run_id, server, tool, arguments, message, schema, question_key, status, "
            "action, answer, answered_by, outcome FROM elicitation_pauses WHERE id = ?",
            (pause_id,),
        ).fetchone()
        if row is None:
            raise ApprovalError("unknown_pause", f"no elicitation pause {pause_id!r}")
        return Pause(
            row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], json.loads(row[7]), row[8],
            row[9], row[10], json.loads(row[11]) if row[11] else None, row[12], row[13],
        )  # fmt: skip

    def pending(self) -> list[Pause]:
        rows = self._db.execute(
            "SELECT id FROM elicitation_pauses WHERE status = 'pending' ORDER BY created_at, id"
        ).fetchall()
        return [self.get(r[0]) for r in rows]

    def answer(self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str) -> Pause:
        """Record a validated answer once. Raises ``ApprovalError`` if it is not pending."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        cur = self._db.execute(
            "UPDATE elicitation_pauses SET status = 'answered', action = ?, answer = ?, answered_by = ?, "
            "answered_at = ? WHERE id = ? AND status = 'pending'",
            (action, json.dumps(content) if content is not None else None, actor, now, pause_id),
        )
        if not cur.rowcount:
            raise ApprovalError(
                "not_pending", f"pause {pause_id} is {self.get(pause_id).status}, not pending"
            )
        return self.get(pause_id)

    def take_answer(self, key: str) -> Pause | None:
        """The answered pause for this question, marked used (an answer is handed over once)."""
        row = self._db.execute(
            "SELECT id FROM elicitation_pauses WHERE question_key = ? AND status = 'answered' "
            "ORDER BY answered_at LIMIT 1",
            (key,),
        ).fetchone()
        if row is None:
            return None
        cur = self._db.execute(
            "UPDATE elicitation_pauses SET status = 'used' WHERE id = ? AND status = 'answered'", (row[0],)
        )
        return self.get(row[0]) if cur.rowcount else None

    def complete(self, pause_id: str, outcome: str) -> None:
        self._db.execute(
            "UPDATE elicitation_pauses SET status = 'completed', outcome = ? WHERE id = ?",
            (outcome, pause_id),
        )

    def close(self) -> None:
        self._db.close()
