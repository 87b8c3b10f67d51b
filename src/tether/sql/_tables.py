"""Every table tether keeps, declared once for SQLite and PostgreSQL (SQLAlchemy Core).

A table belongs to one concern (``CONCERNS``): SQLite keeps each concern in its own file,
PostgreSQL all in one database (schema). The dialects differ only in timestamps (``Instant``),
insertion order (``seq`` on PostgreSQL, the rowid on SQLite) and the triggers that make history
append-only and a stored proposal immutable, all said here once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    DDL,
    BigInteger,
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    event,
    func,
    literal_column,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn, SchemaItem
from sqlalchemy.types import TypeDecorator, TypeEngine

METADATA = MetaData()
PG_ONLY = "postgresql_only"  # a column's ``info`` key: the column exists on PostgreSQL only


def utc(value: datetime) -> datetime:
    """A timestamp as stored: timezone-aware, in UTC. Naive values are refused (ValueError)."""
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return value.astimezone(UTC)


def seconds_now() -> str:
    """Now as the MCP tables' text timestamps hold it (pins, pauses): ISO-8601 in UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class Instant(TypeDecorator[datetime]):
    """A timezone-aware instant: ``TIMESTAMPTZ`` on PostgreSQL, ISO-8601 text in UTC (with
    microseconds) on SQLite, which sorts as the instants do. Naive values are refused."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(Text() if dialect.name == "sqlite" else DateTime(timezone=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        at = utc(value)
        return at.isoformat(timespec="microseconds") if dialect.name == "sqlite" else at

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return datetime.fromisoformat(value) if isinstance(value, str) else value


@compiles(CreateColumn, "sqlite")
def _skip_pg_only(element: CreateColumn, compiler: Any, **kw: Any) -> str | None:
    if element.element.info.get(PG_ONLY):
        return None  # SQLite orders by its rowid instead
    return compiler.visit_create_column(element, **kw)  # type: ignore[no-any-return]


def _seq() -> Column[int]:
    """Insertion order on PostgreSQL (SQLite: the rowid)."""
    return Column("seq", BigInteger, Identity(), nullable=False, info={PG_ONLY: True})


def _serial(name: str) -> Column[int]:
    """An increasing integer primary key: AUTOINCREMENT on SQLite, BIGSERIAL on PostgreSQL."""
    return Column(name, BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)


def _texts(*names: str, nullable: bool = False) -> list[Column[str]]:
    """Text columns, in this order: ``NOT NULL`` unless ``nullable``."""
    return [Column(name, Text, nullable=nullable) for name in names]


def _instants(*names: str, nullable: bool = False) -> list[Column[datetime]]:
    """``Instant`` columns, in this order: ``NOT NULL`` unless ``nullable``."""
    return [Column(name, Instant, nullable=nullable) for name in names]


def _key(name: str) -> Column[str]:
    """A text primary key."""
    return Column(name, Text, primary_key=True)


def _refs(target: str, *names: str) -> list[Column[str]]:
    """``NOT NULL`` text columns, each naming a row of ``target`` (``"table.column"``)."""
    return [Column(name, Text, ForeignKey(target), nullable=False) for name in names]


def _written_at(name: str) -> Column[datetime]:
    """When the row was written, on the database's clock (the workers' PostgreSQL tables)."""
    return Column(name, DateTime(timezone=True), nullable=False, server_default=func.now())


def _table(name: str, *items: SchemaItem, **options: Any) -> Table:
    """One of tether's tables (``METADATA``)."""
    return Table(name, METADATA, *items, **options)


def _ddl(statement: str) -> DDL:
    return DDL(statement)  # type: ignore[no-untyped-call]


_REFUSE_PG = _ddl(
    "CREATE OR REPLACE FUNCTION tether_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN RAISE EXCEPTION '%%', TG_ARGV[0]; END $$"
).execute_if(dialect="postgresql")


def _refuse(table: Table, name: str, when: str, message: str, *, where: str = "") -> None:
    """A trigger refusing ``when`` (``UPDATE``, ``DELETE``, ``UPDATE OF a, b``) on ``table``."""
    if not event.contains(table, "before_create", _REFUSE_PG):
        event.listen(table, "before_create", _REFUSE_PG)  # the function the PostgreSQL triggers call
    head = f"CREATE TRIGGER {name} BEFORE {when} ON {table.name}"
    triggers = {
        "sqlite": f"{head}{f' WHEN {where}' if where else ''} BEGIN SELECT RAISE(ABORT, '{message}'); END",
        "postgresql": f"{head} FOR EACH ROW{f' WHEN ({where})' if where else ''}"
        f" EXECUTE FUNCTION tether_refuse('{message}')",
    }
    for dialect, ddl in triggers.items():
        event.listen(table, "after_create", _ddl(ddl).execute_if(dialect=dialect))


def _append_only(table: Table, message: str = "") -> None:
    """History: a row, once written, is never changed nor deleted."""
    message = message or f"{table.name} is append-only"
    _refuse(table, f"{table.name}_no_update", "UPDATE", message)
    _refuse(table, f"{table.name}_no_delete", "DELETE", message)


def _history(name: str, key: str, *columns: SchemaItem, message: str = "") -> Table:
    """An append-only history: an increasing ``key``, then ``columns``."""
    table = _table(name, _serial(key), *columns, sqlite_autoincrement=True)
    _append_only(table, message)
    return table


# -- migrations' own record ---------------------------------------------------------------------

migrations = _table("_migrations", _key("name"), *_instants("applied_at"))

# -- proposals and decisions ----------------------------------------------------------------------

proposals = _table(
    "proposals",
    _key("id"),
    *_texts("tenant", "tool", "arguments", "content_hash", "effect", "proposed_by"),
    Column("run_id", Text),
    Column("step", Integer),
    Column("call_id", Text),
    *_instants("created_at"),
    Column("status", Text, nullable=False),
    Column("decided_by", Text),
    Column("decided_at", Instant),
    Column("decision_reason", Text, nullable=False, server_default=""),
    CheckConstraint("status IN ('pending', 'approved', 'denied', 'invalidated')"),
    Index("proposals_status", "status"),
    Index("proposals_run", "run_id"),
    # A call id is model-chosen: a proposal belongs to one turn of one run, never a later one.
    Index(
        "proposals_call",
        "run_id",
        "step",
        "call_id",
        unique=True,
        sqlite_where=text("run_id IS NOT NULL"),
        postgresql_where=text("run_id IS NOT NULL"),
    ),
)
_refuse(
    proposals,
    "proposals_immutable",
    "UPDATE OF id, tenant, tool, arguments, content_hash, effect, proposed_by, run_id, step, call_id,"
    " created_at",
    "a stored proposal is immutable",
)
_refuse(proposals, "proposals_no_delete", "DELETE", "proposals are kept as history")

approval_events = _history(
    "approval_events",
    "seq",
    *_texts("proposal_id", "op", "actor", "detail"),
    *_instants("at"),
    Index("approval_events_proposal", "proposal_id"),
)

# -- the effect ledger ------------------------------------------------------------------------------

effect_ledger = _table(
    "effect_ledger",
    _key("key"),
    *_texts("tool", "arguments_hash", "status", "owner"),
    Column("attempts", Integer, nullable=False),
    *_instants("created_at", "updated_at", "lease_until"),
    *_texts("proposal_id", "run_id", "result", nullable=True),
    Column("note", Text, nullable=False, server_default=""),
    # Whose effect it is: a run id can be chosen, and another tenant's call under the same key is
    # refused, never handed this one's outcome. Rows of releases before it hold none.
    Column("tenant", Text),
    CheckConstraint("status IN ('intent', 'done', 'reconciling', 'escalated')"),
    Index("effect_ledger_proposal", "proposal_id"),
    Index("effect_ledger_run", "run_id"),
)
# A recorded outcome is final: never overwritten, never back to 'intent'.
_refuse(
    effect_ledger,
    "effect_ledger_done_final",
    "UPDATE",
    "a recorded outcome is final",
    where="OLD.status = 'done'",
)

# -- run checkpoints --------------------------------------------------------------------------------

run_checkpoints = _table(
    "run_checkpoints",
    _key("run_id"),
    Column("app", Text),
    *_texts("state", "status"),
    Column("stop_reason", Text, nullable=False, server_default=""),
    *_instants("updated_at"),
    Index("run_checkpoints_status", "status"),
)

# Who resumes a run now: one holder across processes (``SqlApprovalStore.claim_resume``), taken
# with the checkpoint it reads, deleted when the resume ends, taken over when its holder died.
run_resumes = _table("run_resumes", _key("run_id"), *_texts("owner"), *_instants("updated_at", "lease_until"))

# -- MCP: pinned tool definitions and elicitation pauses ------------------------------------------

pins = _table(
    "pins",
    *_texts("server", "tool", "sha256", "definition", "endpoint", "approved_by", "approved_at"),
    PrimaryKeyConstraint("server", "tool"),
)

pin_history = _table(
    "pin_history",
    _serial("id"),
    *_texts("server", "tool", "sha256", "action", "actor", "at"),
    sqlite_autoincrement=True,
)

elicitation_pauses = _table(
    "elicitation_pauses",
    _seq(),
    _key("id"),
    *_texts(
        "created_at", "run_id", "server", "tool", "arguments", "message", "schema", "question_key", "status"
    ),
    *_texts("action", "answer", "answered_by", "answered_at", "outcome", nullable=True),
    Index("elicitation_pauses_key", "question_key", "status"),
    Index("elicitation_pauses_run", "run_id"),
)

# -- memory -----------------------------------------------------------------------------------------

memory_records = _table(
    "memory_records",
    _seq(),
    _key("id"),
    *_texts("subject", "scope", "source_system", "status"),
    Column("fingerprint", Text),
    Column("superseded_by", Text, ForeignKey("memory_records.id")),
    Column("body", Text),
    *_instants("created_at"),
    CheckConstraint("status IN ('active', 'superseded', 'deleted')"),
    Index("memory_records_scope_subject", "scope", "subject"),
    Index("memory_records_subject", "subject", postgresql_ops={"subject": "text_pattern_ops"}),
)

memory_events = _history(
    "memory_events",
    "id",
    *_refs("memory_records.id", "record_id"),
    *_texts("op", "actor", "reason"),
    *_instants("at"),
    Index("memory_events_record", "record_id"),
)

memory_conflicts = _table(
    "memory_conflicts",
    *_refs("memory_records.id", "record_id", "other_id"),
    *_instants("at"),
    PrimaryKeyConstraint("record_id", "other_id"),
)

# -- traces and durable workers (PostgreSQL deployments) -------------------------------------------

trace_events = _table(
    "trace_events",
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    *_texts("ts", "kind"),
    Column("data", JSONB, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
    Index("trace_events_kind", "kind"),
    # A run's first event, newest first: the run list reads these rows only, not every event.
    Index("trace_events_first", "ts", "run_id", postgresql_where=text("seq = 1")),
)

tether_workers = _table(
    "tether_workers",
    _key("executor_id"),
    *_texts("host"),
    Column("pid", Integer, nullable=False),
    _written_at("started_at"),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("recovered_at", DateTime(timezone=True)),
    *_texts("recovered_by", "app_version", "apps", nullable=True),
    # The process that registered (``host:pid:token``, as it owns ledger entries), and the start
    # it registered at: a start by a release that does not write it leaves it stale (unequal).
    Column("owner", Text),
    Column("owner_since", DateTime(timezone=True)),
)

tether_run_versions = _table(
    "tether_run_versions",
    _key("run_id"),
    *_texts("app_version"),
    Column("app_digest", Text),
    *_texts("moved_by"),
    _written_at("moved_at"),
)

# An executor id restarted with another version leaves its unfinished runs of the old one here,
# for a survivor of that version to recover.
tether_orphans = _table(
    "tether_orphans",
    *_texts("executor_id", "app_version"),
    _written_at("left_at"),
    PrimaryKeyConstraint("executor_id", "app_version"),
)

# Runs submitted and not yet on DBOS's queue (``tether.durable._intake``).
tether_intake = _table(
    "tether_intake",
    _key("run_id"),
    *_texts("app_version", "tenant", "request"),
    *_instants("submitted_at"),
    Index("tether_intake_order", "submitted_at"),
)

# -- the console's accounts (a SQLite file beside the stores) --------------------------------------

users = _table(
    "users",
    _key("name"),
    *_texts("password_hash", "created_at"),
    Column("disabled", Integer, nullable=False, server_default="0"),
)

grants = _table(
    "grants",
    *_refs("users.name", "user"),
    *_texts("tenant", "role"),
    CheckConstraint("role IN ('viewer', 'reviewer', 'admin')"),
    PrimaryKeyConstraint("user", "tenant"),
)

tokens = _table(
    "tokens",
    _key("id"),
    *_refs("users.name", "user"),
    *_texts("secret_hash", "label", "created_at"),
    Column("expires_at", Text),
    Column("revoked", Integer, nullable=False, server_default="0"),
)

sessions = _table(
    "sessions",
    _key("id_hash"),
    *_refs("users.name", "user"),
    *_texts("csrf", "created_at", "expires_at"),
    Column("seen_at", Text),  # its last request (the idle timeout); none before it was recorded
)

audit = _history(
    "audit",
    "seq",
    *_texts("at", "actor", "action", "tenant", "target", "content_hash", "outcome", "detail"),
    # Where each audited request came from (the console's client address, or "cli").
    Column("client", Text, nullable=False, server_default=""),
    message="the audit log is append-only",
)

CONCERNS: dict[str, tuple[Table, ...]] = {
    "approvals": (proposals, approval_events, effect_ledger, run_checkpoints, run_resumes),
    "pins": (pins, pin_history),
    "pauses": (elicitation_pauses,),
    "memory": (memory_records, memory_events, memory_conflicts),
    "traces": (trace_events,),
    "workers": (tether_workers, tether_run_versions, tether_orphans),
    "intake": (tether_intake,),
    "users": (users, grants, tokens, sessions, audit),
}


def upsert(conn: Connection, table: Table) -> Any:
    """An ``INSERT`` on ``table`` that can say ``ON CONFLICT`` (each dialect builds its own)."""
    return upsert_for(conn.dialect.name, table)


def upsert_for(dialect: str, table: Table) -> Any:
    """``upsert`` for the dialect named ``dialect`` (to build a statement once, ahead of use)."""
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


def lock(conn: Connection, key: str) -> None:
    """Serialise, until the transaction ends, the writers that take the lock named ``key``
    (PostgreSQL's advisory lock; SQLite's writers already hold the whole file)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})


def insertion_order(conn: Connection, table: Table) -> Any:
    """The column giving ``table``'s insertion order: ``seq`` on PostgreSQL, the rowid on SQLite."""
    return table.c.seq if conn.dialect.name == "postgresql" else literal_column(f"{table.name}.rowid")
