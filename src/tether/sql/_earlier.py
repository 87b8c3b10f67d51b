"""The migration names the releases before the tables were declared once (``tether.sql``; up to
2026-12-01, e.g. 12e445ab, 077ce60) recorded for the same tables, per concern and dialect.

Such a release applies each of its names it does not find in ``_migrations`` with a bare ``CREATE
TABLE``: on a store this release created, it crashed ("table proposals already exists"; no JSON
line, a traceback) where a store this release upgraded from it opens and works beside. Recording
those names (``earlier_names``, a migration of each concern's own) makes a store this release
created the same to it as one it upgraded. Only concerns whose tables that release reads and
writes as they are now (its approvals, pins, pauses and memory: proven by
``tests/durable/test_upgrade_round25.py``) are listed: its console writes a session row by
position and fails on the ``seen_at`` column (``users.002_session_seen``) either way (a limit).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import Connection, select

from tether.sql._tables import migrations as migrations_table

EARLIER: dict[str, dict[str, tuple[str, ...]]] = {
    "approvals": {"sqlite": ("a001_proposals", "a002_events", "a003_ledger", "a004_checkpoints")},
    "memory": {"sqlite": ("m001_records", "m002_events", "m003_conflicts")},
    "pins": {"sqlite": ("001_pins",)},
    "pauses": {"sqlite": ("001_elicitation_pauses",)},
}

# Every name a release of that layout recorded (its PostgreSQL stores' too, which this release
# does not record: not proven against that release's PostgreSQL stores), so none of them is ever
# taken for a later release's migration (``tether db check``'s ``later``).
_PG_EARLIER: tuple[str, ...] = ("a001_proposals", "a002_events", "a003_ledger", "a004_checkpoints")
_PG_EARLIER += ("m001_records", "m002_events", "m003_conflicts", "p001_pins", "e001_elicitation_pauses")
_PG_EARLIER += ("t001_trace_events",)
EARLIER_LAYOUT: frozenset[str] = frozenset(
    {n for by in EARLIER.values() for names in by.values() for n in names}
    | {"c001_accounts", "pg_w001_workers"}
    | {f"pg_{n}" for n in _PG_EARLIER}
)


def earlier_names(concern: str) -> Callable[[Connection], None]:
    """A migration step recording the concern's ``EARLIER`` names on this dialect that the
    journal lacks (an upgraded store has them already; a store this release created has none)."""

    def step(conn: Connection) -> None:
        names = EARLIER[concern].get(conn.dialect.name, ())
        have = set(conn.scalars(select(migrations_table.c.name)))
        now = datetime.now(UTC)
        for name in names:
            if name not in have:
                conn.execute(migrations_table.insert().values(name=name, applied_at=now))

    return step
