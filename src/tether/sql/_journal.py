"""The migrations journal (``_migrations``) as a release reads it before it touches a store: which
migrations a later release applied that this one cannot work beside. No SQLAlchemy here: ``tether
submit`` reads it on its one driver connection.

A later release's migration that a release not knowing it cannot work beside (a column renamed
or dropped, a value's meaning changed: not expand-only) ends its name with ``BREAKING_MARK``
("approvals.007_rename_x!"). A release that finds such a name of a concern it opens, not its own,
refuses the store (``SchemaTooNew``) before it reads or writes a row; an unmarked migration it does
not know (a column added) is worked beside, as every tether migration so far.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from tether.errors import ConfigError

BREAKING_MARK = "!"

# The marked migrations this release applies itself (``tether.sql._database.MIGRATIONS``, which
# checks that it lists each): only another release's mark refuses a store.
KNOWN_BREAKING: frozenset[str] = frozenset()


def check_own_marks(key: str, names: Iterable[str]) -> None:
    """Raise ``ConfigError`` for marked (``BREAKING_MARK``) migrations of this release's own
    (``names``) that it does not list in ``KNOWN_BREAKING`` (read at each call): applied, its
    workers and commands would refuse their own store as another release's."""
    if unlisted := [n for n in names if n.endswith(BREAKING_MARK) and n not in KNOWN_BREAKING]:
        raise ConfigError(
            f"{key}: migrations {unlisted} are marked breaking ({BREAKING_MARK!r}) but not listed in"
            " tether.sql._journal.KNOWN_BREAKING; nothing was applied"
        )


class SchemaTooNew(ConfigError):
    """A store a later release migrated in a way this release cannot read or write (a migration
    it does not know, marked ``BREAKING_MARK``). Nothing was read or written: run the release
    that migrated it (or a later one), or restore the store from before that migration."""

    reason = "schema_too_new"


def later_breaking(applied: Iterable[str], concern: str | None = None) -> list[str]:
    """The migrations in ``applied`` (of ``concern``; ``None``: of any) that a later release
    applied and marked ``BREAKING_MARK``, which this release does not know: this release must not
    read or write those stores."""
    prefix = f"{concern}." if concern is not None else ""
    return sorted(
        n for n in applied if n.startswith(prefix) and n.endswith(BREAKING_MARK) and n not in KNOWN_BREAKING
    )


def refuse_later(key: str, applied: Iterable[str], concerns: Iterable[str | None]) -> None:
    """Raise ``SchemaTooNew`` when a later release applied a marked migration of ``concerns``."""
    names, of = list(applied), list(concerns)
    later = sorted({n for concern in of for n in later_breaking(names, concern)})
    if later:
        what = "the deployment" if None in of else f"the {'/'.join(map(str, of))} store"
        raise SchemaTooNew(
            f"{key}: {what} was migrated by a later release ({', '.join(later)}), in a way this"
            " release cannot read or write; nothing was read or written. Run that release (or a"
            " later one) here, or restore the store from before that migration"
        )


def check_driver(conn: Any, key: str, concerns: Iterable[str | None]) -> None:
    """``refuse_later`` on a driver's own connection (psycopg in autocommit, or ``sqlite3``): a
    store with no journal yet (an earlier release's, or none) has no later migration."""
    try:
        names = [str(row[0]) for row in conn.execute("SELECT name FROM _migrations").fetchall()]
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return
        raise
    except Exception as err:
        if type(err).__name__ == "UndefinedTable":  # psycopg's, without importing it here
            return
        raise
    refuse_later(key, names, list(concerns))
