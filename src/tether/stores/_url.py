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
from typing import TYPE_CHECKING, Any, Literal

from tether.errors import ConfigError
from tether.sql._postgres import PG_SCHEMES, PgUrl

if TYPE_CHECKING:
    from tether.sql._database import Database


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
    migrate: bool = True,
) -> Stores:
    """Open (creating and migrating as needed) every store at ``url``. Raises ``ConfigError``
    for an unsupported URL, ``StoreUnavailable`` when PostgreSQL cannot be reached. A client
    command passes ``migrate=False``: nothing is created or altered, and a store an earlier
    release set up that lacks this release's migrations raises ``NotMigrated``."""
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore
    from tether.sql._database import Database

    loc = parse_url(url)
    kw: dict[str, Any] = {"policy": memory_policy}
    if memory_clock is not None:
        kw["clock"] = memory_clock
    if loc.backend == "sqlite":
        from tether.memory._sqlstore import SqliteMemory
        from tether.policy._sqlite_store import SqliteApprovalStore

        assert loc.path is not None
        if migrate:
            loc.path.mkdir(parents=True, exist_ok=True)
        names = (
            "approvals.db",
            "mcp-pins.db",
            "mcp-state.db",
            *(("memory.db",) if memory_policy is not None else ()),
        )
        files = _files(loc.path, names, migrate)
        opened = [f for f in files if isinstance(f, Database)]
        try:
            approvals, pins, pauses = SqliteApprovalStore(files[0]), PinStore(files[1]), PauseStore(files[2])
            memory = SqliteMemory(files[3], **kw) if memory_policy is not None else None
        except BaseException:
            for each in opened:
                each.close()
            raise
        closers = [s.close for s in (approvals, pins, pauses, memory) if s is not None]
        closers += [each.close for each in opened]
        return Stores(loc, approvals, pins, pauses, memory, _closers=closers)

    from tether.memory._sqlstore import PgMemory
    from tether.policy._pg_store import PgApprovalStore
    from tether.trace._pg_index import PgTraceIndex

    db = Database.postgresql(loc.url, application_name=application_name, max_size=pool_size)
    db.migrating = migrate
    try:
        traces = PgTraceIndex(db)
        shared = PgMemory(db, **kw) if memory_policy is not None else None
        stores = (PgApprovalStore(db), PinStore(db), PauseStore(db))
    except BaseException:
        db.close()
        raise
    return Stores(loc, *stores, shared, traces, db, [db.close, traces.flush])


def _files(folder: Path, names: tuple[str, ...], migrate: bool) -> list[Path | Database]:
    """A SQLite deployment's store files: their paths (each store creates and migrates its own),
    or for a client (``migrate`` off) ``Database``s that only check their migrations, opened
    once every file is there: a missing one raises ``NotMigrated``, and no file is made."""
    from tether.sql._database import Database, NotMigrated

    paths = [folder / name for name in names]
    if migrate:
        return list(paths)
    for path in paths:
        if not path.exists():
            raise NotMigrated(f"{path}: no such store (tether db init --db URL sets a deployment up)")
    opened: list[Path | Database] = []
    for path in paths:
        db = Database.sqlite(path)
        db.migrating = False
        opened.append(db)
    return opened
