"""PostgreSQL URLs for tether's stores, and the error of an unreachable database.

A URL is a libpq URL plus one tether parameter, ``schema``: ``postgresql://u@h/db?schema=t1`` puts
every table in schema ``t1`` (created if missing), so one database can hold isolated deployments.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from tether.errors import ConfigError, TetherError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

PG_SCHEMES = ("postgresql://", "postgres://")  # how a PostgreSQL URL begins

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class StoreUnavailable(TetherError):
    """The database could not be reached, or a commit's outcome is unknown (connection lost)."""


# What the server says of a statement it cut at a bound (``statement_timeout``, an operator's
# cancel; ``lock_timeout``): the session lives, its transaction is rolled back.
CUT = frozenset({"57014", "55P03"})


class StoreHeld(StoreUnavailable):
    """A statement cut at the server's bound on every try (``statement_timeout``, ``lock_timeout``:
    it waited on a lock another session held, a worker of any release inside a transaction):
    nothing was written, and the same operation may be asked again once that session is done."""

    reason = "store_busy"


class StoreRefused(ConfigError):
    """The database refused a statement to the role or server the URL names: a right the role
    lacks (``store_forbidden``: a worker's role that may write rows but not alter tables), or a
    server or role that takes no writes (``store_read_only``: a read replica, a hot standby,
    ``default_transaction_read_only``). Nothing was written; no retry will change it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# The server's refusals (SQLSTATE) of a statement the role or server may not run, by reason.
_REFUSALS = {"42501": "store_forbidden", "25006": "store_read_only"}
_MIGRATOR = (
    "a migration needs a role that may create in tether's schema and owns its tables: run tether"
    " db init once with such a role (the schema's owner); workers and commands may then run with a"
    " role that only reads and writes rows"
)


def refused(key: str, err: BaseException | None, migrating: str | None = None) -> StoreRefused | None:
    """``StoreRefused`` naming the store ``key`` (and what it was ``migrating``, if it was) when
    ``err`` is the server's refusal of the role or of any write, else ``None``."""
    reason = _REFUSALS.get(str(getattr(err, "sqlstate", None)))
    if reason is None:
        return None
    said = " ".join(str(err).split())
    what = migrating or "a statement"
    if reason == "store_read_only":
        fix = (
            "the server or role takes no writes (a read replica or hot standby, or"
            " default_transaction_read_only set for the role or database): point the URL at the"
            " primary, with a role that may write"
        )
    elif migrating:
        fix = _MIGRATOR
    else:
        fix = (
            "grant the URL's role USAGE on tether's schemas and SELECT, INSERT, UPDATE, DELETE on"
            " their tables, or use a role that has them"
        )
    return StoreRefused(reason, f"{key}: the database refused {what} ({said}); nothing was written: {fix}")


def ensure_schema(pg: PgUrl, key: str) -> None:
    """Create the URL's schema unless it is there (looked up first: ``CREATE SCHEMA IF NOT
    EXISTS`` needs the database's CREATE right even where the schema exists, which a worker's
    role or a read replica lacks). Raises ``StoreUnavailable``, ``StoreRefused``."""
    import psycopg

    try:
        with psycopg.connect(pg.conninfo, autocommit=True, connect_timeout=5) as conn:
            found = conn.execute("SELECT to_regnamespace(%s)", (pg.schema,)).fetchone()
            if found is None or found[0] is None:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {pg.schema}")
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
        pass  # another process created it at the same instant (IF NOT EXISTS does not lock)
    except psycopg.OperationalError as err:
        raise StoreUnavailable(f"PostgreSQL at {key} is unreachable: {err}") from None
    except psycopg.Error as err:
        if (no := refused(key, err, f"CREATE SCHEMA {pg.schema}")) is not None:
            raise no from None
        raise


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A parsed ``postgresql://`` URL: what psycopg connects to, and tether's schema.

    Every form libpq reads is taken, as libpq reads it (psycopg's ``conninfo_to_dict``): a
    Unix-socket folder as ``?host=/run/postgresql`` or percent-encoded in the host part, several
    hosts (``h1,h2:5433``), IPv6 literals, and parameters such as ``sslmode``."""

    conninfo: str
    schema: str | None = None

    @classmethod
    def parse(cls, url: str) -> PgUrl:
        """Raises ``ConfigError`` for another scheme, a URL libpq cannot read, or a malformed
        schema name."""
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        parts = urlsplit(url)
        if f"{parts.scheme}://" not in PG_SCHEMES:
            raise ConfigError(f"not a PostgreSQL URL: {_without_password(url)!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), None)
        if schema is not None and not _SCHEMA.match(schema):
            raise ConfigError(f"schema {schema!r} must be a lowercase identifier")
        rest = urlencode([(k, v) for k, v in query if k != "schema"], quote_via=quote)  # libpq: no "+"
        # Written out, not by urlunsplit: that drops the '//' of an empty host part
        # ('postgresql:///db?host=/run/postgresql'), which libpq then cannot read.
        conninfo = f"postgresql://{parts.netloc}{parts.path}" + (f"?{rest}" if rest else "")
        try:
            conninfo_to_dict(conninfo)
        except ProgrammingError as err:
            raise ConfigError(
                f"a PostgreSQL URL libpq cannot read: {_without_password(url)!r} ({err})"
            ) from None
        return cls(conninfo, schema)

    def params(self) -> dict[str, str]:
        """The connection parameters, as libpq reads them (``host``, ``port``, ``dbname``, …)."""
        from psycopg.conninfo import conninfo_to_dict

        return {k: str(v) for k, v in conninfo_to_dict(self.conninfo).items()}

    @property
    def database(self) -> str:
        """The database's name (libpq's default: the user's name)."""
        params = self.params()
        return params.get("dbname") or params.get("user") or getpass.getuser()

    @property
    def where(self) -> str:
        """Where the server is, for messages: ``host:port`` (the first of several), or the
        socket folder."""
        params = self.params()
        host = params.get("host", "").split(",")[0] or "localhost"
        port = params.get("port", "").split(",")[0] or "5432"
        return host if host.startswith("/") else f"{host}:{port}"

    def with_database(self, name: str) -> str:
        """A libpq connection string for database ``name`` on the same server(s)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.conninfo, dbname=name)

    def sqlalchemy(self) -> str:
        """The same database as a SQLAlchemy URL on psycopg 3 (what DBOS takes): every parameter
        but the user, password and database is passed in the query, as libpq read it."""
        return self._url("postgresql+psycopg").render_as_string(hide_password=False)

    def redacted(self) -> str:
        """The URL as written, without its password (for messages and logs)."""
        return re.sub(r"([?&]password=)[^&]*", r"\1***", _without_password(self.conninfo))

    def _url(self, driver: str) -> URL:
        from sqlalchemy.engine import URL

        params = self.params()
        user, password = params.pop("user", None), params.pop("password", None)
        database = params.pop("dbname", None) or user or getpass.getuser()
        return URL.create(driver, username=user, password=password, database=database, query=params)


def _without_password(url: str) -> str:
    """``url`` with the password of its user part hidden (for an error about the URL itself)."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


# The migrators' own lock (PostgreSQL's advisory lock, one per database, every release's), and
# who holds it: each holder, and the sessions it itself waits for (``pg_blocking_pids``).
LOCK_KEY = "hashtext('tether_migrations')"
LOCK_HOLDERS = (
    "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''),"
    " extract(epoch FROM now() - a.state_change)::float,"
    " (SELECT string_agg(format('pid %s (%s, %s)', b.pid, coalesce(nullif(b.application_name, ''),"
    " 'no name'), coalesce(b.state, '')), '; ') FROM pg_stat_activity b"
    " WHERE b.pid = ANY(pg_blocking_pids(a.pid))) FROM pg_locks l"
    " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
    f" AND l.objsubid = 1 AND l.objid = ({LOCK_KEY}::bigint & 4294967295)::oid"
    f" AND l.classid = (({LOCK_KEY}::bigint >> 32) & 4294967295)::oid"
)
