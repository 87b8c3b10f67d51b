"""One URL selects where everything tether keeps lives.

``sqlite:///dir`` (relative) or ``sqlite:////abs/dir``, the embedded default: one SQLite file per
store in ``dir``, one machine. ``postgresql://user@host:5432/db[?schema=name]``, the scale-out
backend: every store (and the trace index) in one database, shared by any number of processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from tether.errors import ConfigError
from tether.sql._postgres import PG_SCHEMES, PgUrl


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed storage URL."""

    backend: Literal["sqlite", "postgresql"]
    url: str
    path: Path | None = None  # the directory of a SQLite deployment

    @property
    def schema(self) -> str | None:
        if self.backend != "postgresql":
            return None
        return PgUrl.parse(self.url).schema


def parse_url(url: str) -> Location:
    """Raises ``ConfigError`` naming what is accepted."""
    text = str(url).strip()
    if text.startswith(PG_SCHEMES):
        PgUrl.parse(text)  # validates the schema parameter
        return Location("postgresql", text)
    if text.startswith("sqlite:///"):
        rest = text[len("sqlite:///") :]
        if not rest:
            raise ConfigError("sqlite URL without a directory: use sqlite:///dir or sqlite:////abs/dir")
        return Location("sqlite", text, Path(rest))
    raise ConfigError(
        f"unsupported storage URL {text!r}: use sqlite:///dir (embedded) or postgresql://… (scale-out)"
    )


@dataclass
class Stores:
    """Every store of one deployment. ``memory`` exists when a memory policy was given;
    ``traces`` (a trace sink readable from any machine) on PostgreSQL only."""

    location: Location
    approvals: Any
    pins: Any  # tether.mcp._pinning.Pins
    pauses: Any  # tether.mcp._pauses.Pauses
    memory: Any = None
    traces: Any = None
    db: Any = None  # the shared Database (postgresql)
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()


def open_stores(
    url: str,
    *,
    memory_policy: Any = None,
    memory_clock: Callable[[], datetime] | None = None,
    application_name: str | None = None,
    pool_size: int = 8,
) -> Stores:
    """Open (creating and migrating as needed) every store at ``url``. Raises ``ConfigError``
    for an unsupported URL, ``StoreUnavailable`` when PostgreSQL cannot be reached."""
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore

    loc = parse_url(url)
    kw: dict[str, Any] = {"policy": memory_policy}
    if memory_clock is not None:
        kw["clock"] = memory_clock
    if loc.backend == "sqlite":
        from tether.memory._sqlstore import SqliteMemory
        from tether.policy._sqlite_store import SqliteApprovalStore

        assert loc.path is not None
        loc.path.mkdir(parents=True, exist_ok=True)
        approvals = SqliteApprovalStore(loc.path / "approvals.db")
        pins = PinStore(loc.path / "mcp-pins.db")
        pauses = PauseStore(loc.path / "mcp-state.db")
        memory = SqliteMemory(loc.path / "memory.db", **kw) if memory_policy is not None else None
        closers = [s.close for s in (approvals, pins, pauses, memory) if s is not None]
        return Stores(loc, approvals, pins, pauses, memory, _closers=closers)

    from tether.memory._sqlstore import PgMemory
    from tether.policy._pg_store import PgApprovalStore
    from tether.sql._database import Database
    from tether.trace._pg_index import PgTraceIndex

    db = Database.postgresql(loc.url, application_name=application_name, max_size=pool_size)
    traces = PgTraceIndex(db)
    shared = PgMemory(db, **kw) if memory_policy is not None else None
    return Stores(
        loc, PgApprovalStore(db), PinStore(db), PauseStore(db), shared, traces, db, [db.close, traces.flush]
    )
