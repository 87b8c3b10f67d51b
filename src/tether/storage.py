"""Ordered, named SQLite migrations, recorded in a ``_migrations`` table (one mechanism for every store)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime

__all__ = ["Migration", "apply_migrations"]

Migration = tuple[str, tuple[str, ...]]


def apply_migrations(
    conn: sqlite3.Connection, migrations: Iterable[Migration], *, now: str | None = None
) -> list[str]:
    """Apply, in order, the migrations not yet recorded; returns the names applied.

    Runs inside the caller's transaction, so a failing migration leaves nothing half-applied.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    applied = {name for (name,) in conn.execute("SELECT name FROM _migrations")}
    stamp = now or datetime.now(UTC).isoformat(timespec="seconds")
    done = []
    for name, statements in migrations:
        if name in applied:
            continue
        for sql in statements:
            conn.execute(sql)
        conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, stamp))
        done.append(name)
    return done
