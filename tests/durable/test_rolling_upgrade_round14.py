"""An operator's rolling upgrade, fourteenth round: a store file a worker of any release (or a
tool: a backup, ``sqlite3`` in exclusive mode) holds while an upgraded worker opens it.

What did not hold, fixed here and pinned below:

- a SQLite store another connection held past the busy timeout when a worker opened it (the
  ``journal_mode`` switch needs the file's lock) was reported as "not a SQLite database file
  (database is locked)": an operator told so may delete or restore a good store during the
  upgrade. It is now the error any store operation held so raises (``database is locked:``
  the file, the busy timeout; ``busy``: the CLI's ``store_busy``, run the command again).
- a good store opened on a full disk (a write refused: ``disk I/O error``, ``database or disk
  is full``) was called "not a SQLite database file" too; it is said not to open, with SQLite's
  words, nothing read or written. A file that is no database is still called so.
- a store file a worker could not create (a read-only or full file system, a parent that is a
  file) came out as the bare ``OSError`` (``FileExistsError: File exists: '.../plain'``), not
  naming the store; it is a ``ConfigError`` naming the file and why, nothing written.
- a write a full disk refused said only ``disk I/O error`` (or ``database or disk is full``,
  ``attempt to write a readonly database``), not which of a deployment's stores; it names the
  file, as one held past the busy timeout did (same type and SQLite codes).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.sql._database import Database, busy


@pytest.fixture
def held_store(tmp_path: Path) -> Iterator[Path]:
    """A WAL store file another connection holds in exclusive mode inside a write."""
    file = tmp_path / "store.db"
    holder = sqlite3.connect(file, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("CREATE TABLE kept (x INTEGER)")
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO kept VALUES (1)")
    try:
        yield file
    finally:
        holder.execute("COMMIT")
        holder.close()


def test_a_held_store_is_said_held_not_called_no_database(held_store: Path) -> None:
    with pytest.raises(sqlite3.OperationalError) as caught:
        Database.sqlite(held_store, busy_timeout_s=0.1)
    said = str(caught.value)
    assert "not a SQLite database" not in said
    assert said.startswith(f"database is locked: {held_store}") and "0.1 s busy timeout" in said
    assert busy(caught.value)  # as any store operation held so: ask again (the CLI: store_busy)


def test_a_store_opens_once_its_holder_lets_go(tmp_path: Path) -> None:
    file = tmp_path / "store.db"
    holder = sqlite3.connect(file, isolation_level=None)
    holder.execute("CREATE TABLE kept (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError, match=r"database is locked: .*busy timeout"):
        Database.sqlite(file, busy_timeout_s=0.1)
    holder.execute("COMMIT")
    holder.close()
    db = Database.sqlite(file, busy_timeout_s=0.1)
    try:
        assert db.snapshot(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM kept").scalar()) == 0
    finally:
        db.close()


def test_a_file_that_is_no_database_is_still_called_so(tmp_path: Path) -> None:
    file = tmp_path / "store.db"
    file.write_bytes(b"not sqlite " * 500)
    with pytest.raises(ConfigError, match="is not a SQLite database file"):
        Database.sqlite(file)


@pytest.mark.parametrize("below", ["store.db", "sub/store.db"])
def test_a_store_in_a_place_that_cannot_hold_it_is_a_clear_error(tmp_path: Path, below: str) -> None:
    plain = tmp_path / "plain"
    plain.write_text("an operator's file, not a folder")
    created = r"SQLite database file .* cannot be created: .*nothing was written"
    with pytest.raises(ConfigError, match=created):
        Database.sqlite(plain / below)
    assert plain.read_text() == "an operator's file, not a folder"
    Database.sqlite(tmp_path / below).close()  # the same store where a folder can hold it


_FULL_DISK = """
import resource, signal, sys
from tether.errors import ConfigError
from tether.sql._database import Database, busy
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
try:
    Database.sqlite(sys.argv[1]).close()
except ConfigError as err:
    print(err)
"""


def test_a_good_store_on_a_full_disk_is_not_called_no_database(tmp_path: Path) -> None:
    file = tmp_path / "store.db"
    db = Database.sqlite(file)
    db.run(lambda conn: conn.exec_driver_sql("CREATE TABLE kept (x INTEGER)"))
    db.run(lambda conn: conn.exec_driver_sql("INSERT INTO kept VALUES (7)"))
    db.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    said = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(file)], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "not a SQLite database" not in said
    assert f"{file} cannot be opened as a SQLite database" in said and "nothing was read or written" in said
    db = Database.sqlite(file)  # room again: the store is as it was
    try:
        assert db.snapshot(lambda conn: conn.exec_driver_sql("SELECT x FROM kept").scalars().all()) == [7]
    finally:
        db.close()


_FULL_ON_WRITE = """
import resource, signal, sys
from tether.sql._database import Database, busy
db = Database.sqlite(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (60000, 60000))
try:
    db.run(lambda conn: conn.exec_driver_sql("INSERT INTO kept VALUES (?)", ("y" * 100000,)))
except Exception as err:
    print(type(err).__name__, "|", err)
db.run(lambda conn: conn.exec_driver_sql("INSERT INTO kept VALUES (?)", ("small",)))
"""


def test_a_write_the_full_disk_refused_names_the_store(tmp_path: Path) -> None:
    file = tmp_path / "store.db"
    db = Database.sqlite(file)
    db.run(lambda conn: conn.exec_driver_sql("CREATE TABLE kept (x TEXT)"))
    db.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    said = subprocess.run(
        [sys.executable, "-c", _FULL_ON_WRITE, str(file)], env=env, capture_output=True, text=True, check=True
    ).stdout
    kind, _, words = said.partition(" | ")
    assert kind == "OperationalError" and str(file) in words  # the driver's type, the store named
    db = Database.sqlite(file)
    try:  # the refused write left nothing; the next one, with room, was kept
        kept = db.snapshot(lambda conn: conn.exec_driver_sql("SELECT x FROM kept").scalars().all())
        assert kept == ["small"]
    finally:
        db.close()
