"""Store operations written once for SQLite and PostgreSQL.

An operation is a generator that yields ``Sql`` statements (``%s`` placeholders) and receives
their results; whoever drives it owns the transaction. ``tether.pg.PgDatabase`` drives it on
psycopg, ``tether.storage.SqliteOps`` on a ``SqliteDatabase`` (``%s`` becomes ``?``). Both
satisfy ``OpDatabase``, so a store holds one set of operations and one class of methods, and
its backend holds only what truly differs: the DDL of its migrations, and the few points of
SQL and typing a ``Dialect`` names (insertion order, row locks, advisory locks, timestamps).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

__all__ = ["POSTGRES", "SQLITE", "Dialect", "Fetch", "Op", "OpDatabase", "Sql", "ts"]

T = TypeVar("T")

Fetch = Literal["all", "one", "none", "rowcount"]


@dataclass(frozen=True, slots=True)
class Sql:
    """One statement of an operation, and what the operation wants back."""

    text: str
    params: tuple[Any, ...] = ()
    fetch: Fetch = "all"


Op = Generator[Sql, Any, T]


def ts(value: datetime) -> datetime:
    """A timestamp as stored: timezone-aware, in UTC. Naive values are refused (ValueError)."""
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return value.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Dialect:
    """What an operation's SQL must say differently on one backend.

    ``order``: the column that gives insertion order. ``for_update``: the suffix of a SELECT that
    locks the rows it reads until the transaction ends (empty on SQLite, whose writers hold the
    whole file from their first statement); ``skip_locked``: the same, passing over rows another
    transaction holds. ``advisory``: whether named locks exist (SQLite needs none, for the same
    reason). ``text_time``: timestamps are stored as ISO text in UTC (SQLite) rather than as
    ``TIMESTAMPTZ``.
    """

    order: str
    for_update: str
    skip_locked: str
    advisory: bool
    text_time: bool

    def lock(self, key: str) -> Op[None]:
        """Serialise, until the transaction ends, the writers that take the lock named ``key``."""
        if self.advisory:
            yield Sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,), fetch="none")

    def stamp(self, value: datetime) -> Any:
        """A timestamp parameter (UTC; naive values are refused with ValueError)."""
        at = ts(value)
        return at.isoformat(timespec="microseconds") if self.text_time else at

    def instant(self, value: Any) -> datetime:
        """A stored timestamp read back."""
        return datetime.fromisoformat(value) if self.text_time else value


SQLITE = Dialect(order="rowid", for_update="", skip_locked="", advisory=False, text_time=True)
POSTGRES = Dialect(
    order="seq",
    for_update=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    advisory=True,
    text_time=False,
)


class OpDatabase(Protocol):
    """A database that runs operations, each as one transaction: ``run`` for writes, ``read``
    for reads (a snapshot where the backend has one); ``a``-prefixed twins for code on the event
    loop, which never wait on the database there."""

    @property
    def dialect(self) -> Dialect: ...

    def run(self, fn: Callable[..., Op[T]], /, *args: Any) -> T: ...

    def read(self, fn: Callable[..., Op[T]], /, *args: Any) -> T: ...

    async def arun(self, fn: Callable[..., Op[T]], /, *args: Any) -> T: ...

    async def aread(self, fn: Callable[..., Op[T]], /, *args: Any) -> T: ...
