"""FrozenStore on disk: one appended line per entry, never a rewrite; a torn last line is survivable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.context._store import FrozenStore
from tether.errors import ConfigError


def test_each_entry_appends_one_line_and_never_rewrites_what_is_there(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    store = FrozenStore(path)
    before = b""
    for n in range(20):
        assert store.freeze(f"tool:{n}", f"digest {n}\nwith a newline") == f"digest {n}\nwith a newline"
        now = path.read_bytes()
        assert now.startswith(before) and now.count(b"\n") == n + 2  # header + one line per entry
        before = now
    assert store.freeze("tool:3", "a second text") == "digest 3\nwith a newline"  # frozen: first wins
    store.set_record("compaction", {"start": 1, "upto": 4})
    store.set_record("compaction", {"start": 1, "upto": 4})  # unchanged: nothing written
    store.set_record("compaction", {"start": 1, "upto": 9})
    assert path.read_bytes().startswith(before) and path.read_bytes().count(b"\n") == 1 + 20 + 2
    store.close()

    again = FrozenStore(path)
    assert len(again) == 20 and again.get("tool:3") == "digest 3\nwith a newline"
    assert again.record("compaction") == {"start": 1, "upto": 9}


def test_a_torn_last_line_is_skipped_and_the_next_entry_starts_a_clean_line(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    store = FrozenStore(path)
    store.freeze("a", "first")
    store.freeze("b", "second")
    store.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"t": "c", "v": "cut sho')  # a crash in the middle of a write

    reopened = FrozenStore(path)
    assert (reopened.get("a"), reopened.get("b"), reopened.get("c")) == ("first", "second", None)
    reopened.freeze("c", "third")
    reopened.close()
    assert path.read_bytes() == whole + b'{"t": "c", "v": "third"}\n'
    assert FrozenStore(path).get("c") == "third"


def test_a_first_write_cut_short_leaves_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    path.write_bytes(b'{"format": "tether.fro')
    store = FrozenStore(path)
    assert len(store) == 0
    store.freeze("a", "x")
    store.close()
    assert FrozenStore(path).get("a") == "x"


def test_damage_before_the_last_line_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    store = FrozenStore(path)
    store.freeze("a", "first")
    store.freeze("b", "second")
    store.close()
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:-3]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ConfigError, match="line 2 is damaged"):
        FrozenStore(path)
    path.write_text('{"something": "else"}\n')
    with pytest.raises(ConfigError, match="unknown format"):
        FrozenStore(path)


def test_a_store_in_the_earlier_single_object_format_is_read_and_converted(tmp_path: Path) -> None:
    path = tmp_path / "ctx.json"
    legacy = {"version": 1, "texts": {"tool:1": "digest"}, "records": {"tools_loaded": ["a"]}}
    path.write_text(json.dumps(legacy, sort_keys=True))
    store = FrozenStore(path)
    assert store.get("tool:1") == "digest" and store.record("tools_loaded") == ["a"]
    store.freeze("tool:2", "more")
    store.close()
    assert len(path.read_text().splitlines()) == 4  # header, two texts, one record
    again = FrozenStore(path)
    assert (again.get("tool:1"), again.get("tool:2"), again.record("tools_loaded")) == (
        "digest",
        "more",
        ["a"],
    )


def test_superseded_records_are_compacted_when_the_store_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    store = FrozenStore(path)
    store.freeze("tool:1", "digest")
    for n in range(200):
        store.set_record("compaction", {"upto": n})
    store.close()
    assert len(path.read_text().splitlines()) == 202
    again = FrozenStore(path)
    assert again.record("compaction") == {"upto": 199} and again.get("tool:1") == "digest"
    assert len(path.read_text().splitlines()) == 3


def test_without_a_path_nothing_touches_the_disk(tmp_path: Path) -> None:
    store = FrozenStore()
    store.freeze("a", "x")
    store.set_record("r", 1)
    assert (store.get("a"), store.record("r")) == ("x", 1)
    assert list(tmp_path.iterdir()) == []
