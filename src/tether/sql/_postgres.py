"""PostgreSQL URLs for tether's stores, and the error of an unreachable database.

A URL is a libpq URL plus one tether parameter, ``schema``: ``postgresql://u@h/db?schema=t1`` puts
every table in schema ``t1`` (created if missing), so one database can hold isolated deployments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.errors import ConfigError, TetherError

PG_SCHEMES = ("postgresql://", "postgres://")  # how a PostgreSQL URL begins

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class StoreUnavailable(TetherError):
    """The database could not be reached, or a commit's outcome is unknown (connection lost)."""


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A parsed ``postgresql://`` URL: what psycopg connects to, and tether's schema."""

    conninfo: str
    schema: str | None = None

    @classmethod
    def parse(cls, url: str) -> PgUrl:
        """Raises ``ConfigError`` for another scheme or a malformed schema name."""
        parts = urlsplit(url)
        if f"{parts.scheme}://" not in PG_SCHEMES:
            raise ConfigError(f"not a PostgreSQL URL: {url!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), None)
        if schema is not None and not _SCHEMA.match(schema):
            raise ConfigError(f"schema {schema!r} must be a lowercase identifier")
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return cls(urlunsplit(("postgresql", parts.netloc, parts.path, rest, parts.fragment)), schema)

    def sqlalchemy(self) -> str:
        """The same database as a SQLAlchemy URL on psycopg 3 (what DBOS takes)."""
        return "postgresql+psycopg" + self.conninfo[len("postgresql") :]

    def redacted(self) -> str:
        """The URL without its password (for messages and logs)."""
        from sqlalchemy.engine import make_url

        return make_url(self.conninfo).render_as_string(hide_password=True)
