"""Persistence for context rewrites: frozen replacement texts and large tool outputs.

A replacement (a summary, a stored output's preview, a compaction digest) is frozen: the first
text produced for a key is the only one used, after a restart too, so a resumed session rebuilds
requests byte for byte. A crash can tear at most the last line of the store; reading skips it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tether.errors import ConfigError, NotFoundError

__all__ = ["FrozenStore", "LargeOutputStore"]

_HEADER = {"format": "tether.frozen", "version": 2}


class FrozenStore:
    """Write-once texts by key, and small JSON records; persisted when ``path`` is given.

    On disk (JSON lines, one append per entry): a header, then ``{"t": key, "v": text}`` (the
    first for a key wins) and ``{"r": key, "v": value}`` (the last wins). A version 1 file is
    rewritten once in this format. Raises ``ConfigError`` for a file that is not a context store
    or is damaged before its last line.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._texts: dict[str, str] = {}
        self._records: dict[str, Any] = {}
        self._fd: int | None = None
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def get(self, key: str) -> str | None:
        return self._texts.get(key)

    def freeze(self, key: str, text: str) -> str:
        """Store ``text`` under ``key`` unless a text is already frozen there; return the frozen one."""
        if key in self._texts:
            return self._texts[key]
        self._append({"t": key, "v": text})
        self._texts[key] = text
        return text

    def __contains__(self, key: str) -> bool:
        return key in self._texts

    def __len__(self) -> int:
        return len(self._texts)

    def record(self, key: str) -> Any:
        return self._records.get(key)

    def set_record(self, key: str, value: Any) -> None:
        if key in self._records and self._records[key] == value:
            return
        self._append({"r": key, "v": value})
        self._records[key] = value

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()

    def _append(self, entry: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = _line(entry)
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(self._fd).st_size == 0:
                line = _line(_HEADER) + line
        # One write per entry: with O_APPEND, entries of several writers never interleave.
        _write_all(self._fd, line)

    def _load(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ConfigError(f"context store {path} is unreadable: {err}") from None
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a line a crash cut short
        parsed = [_parse(path, n, raw) for n, raw in enumerate(lines, 1) if raw.strip()]
        if torn.strip():
            try:
                parsed.append(json.loads(torn))
                torn = b""
            except ValueError:
                pass  # a torn last line: skipped, and cut off before the next append
        if not parsed:
            if torn.strip() and not _line(_HEADER).startswith(torn):
                raise ConfigError(f"context store {path} has an unknown format")
            if torn:  # a first write cut short: nothing was stored
                os.truncate(path, 0)
            return
        first = parsed[0]
        if isinstance(first, dict) and first.get("version") == 1 and len(parsed) == 1 and not torn:
            self._texts = {str(k): str(v) for k, v in first.get("texts", {}).items()}
            self._records = dict(first.get("records", {}))
            self._rewrite(path)
            return
        if first != _HEADER:
            raise ConfigError(f"context store {path} has an unknown format")
        record_lines = 0
        for n, entry in enumerate(parsed[1:], 2):
            if isinstance(entry, dict) and set(entry) == {"t", "v"} and isinstance(entry["v"], str):
                self._texts.setdefault(str(entry["t"]), entry["v"])
            elif isinstance(entry, dict) and set(entry) == {"r", "v"}:
                self._records[str(entry["r"])] = entry["v"]
                record_lines += 1
            else:
                raise ConfigError(f"context store {path}: line {n} is not an entry")
        if record_lines > 64 + 4 * len(self._records):
            self._rewrite(path)  # mostly superseded records: keep the file proportional to its content
        elif torn or not data.endswith(b"\n"):
            # Keep only whole lines, so the next entry does not glue onto a torn one.
            with open(path, "r+b") as f:
                f.truncate(len(data) - len(torn))
                if not data[: len(data) - len(torn)].endswith(b"\n"):
                    f.seek(0, os.SEEK_END)
                    f.write(b"\n")

    def _rewrite(self, path: Path) -> None:
        """Replace the file by its live entries (temp file, fsync, rename); only at open."""
        entries = [_HEADER]
        entries += [{"t": k, "v": v} for k, v in self._texts.items()]
        entries += [{"r": k, "v": v} for k, v in self._records.items()]
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(b"".join(_line(e) for e in entries))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _line(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def _parse(path: Path, n: int, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError(f"context store {path}: line {n} is damaged") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LargeOutputStore:
    """Tool outputs too big for the context, kept outside it under a content hash (in memory
    when ``root`` is None). ``read`` pages through a text and names the calls whose output it is
    (``relays``), so a page is judged as the output it repeats; each ``run`` has its own origins.

    One folder serves every run and tenant of a host, and a ref is only a digest of the text
    (one that leaked, or a known document's): a store reads an output only when a run it may
    read (``readable``: its own, and its ancestors', ``share``) stored it for its ``tenant``.
    """

    def __init__(self, root: str | Path | None = None, run: str = "", tenant: str = "") -> None:
        self.root = Path(root) if root is not None else None
        self.run, self.tenant = run, tenant
        self.readable: set[str] = {run}
        self._memory: dict[str, str] = {}
        self._entries: dict[str, list[dict[str, Any]]] = {}

    def share(self, runs: Iterable[str]) -> None:
        """Let this run read what ``runs`` (its parent and the parent's ancestors) stored for
        its tenant: a parent hands its subagent a ref to read."""
        self.readable.update(runs)

    def put(self, text: str, origin: str | None = None) -> str:
        ref = "out_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        entry = {"run": self.run, "tenant": self.tenant, "origin": origin}
        if self.root is None:
            self._memory[ref] = text
            if entry not in (entries := self._entries.setdefault(ref, [])):
                entries.append(entry)
            return ref
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{ref}.txt"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        if entry not in self._entries_of(ref):
            # One write that starts a line of its own: a torn line is never glued to the next.
            fd = os.open(self.root / f"{ref}.origins", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                _write_all(fd, b"\n" + _line(entry))
            finally:
                os.close(fd)
        return ref

    def _entries_of(self, ref: str) -> list[dict[str, Any]]:
        """Who stored ``ref``: one entry per run, tenant and origin (torn lines skipped)."""
        if self.root is None or not _is_ref(ref):
            return self._entries.get(ref, []) if self.root is None else []
        try:
            lines = (self.root / f"{ref}.origins").read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError):
            return []
        found: list[dict[str, Any]] = []
        for raw in lines:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a torn line
            if isinstance(entry, dict):
                found.append(entry)
        return found

    def _ours(self, entry: dict[str, Any]) -> bool:
        # An entry an earlier release wrote names no tenant: its run's is this one's.
        return entry.get("tenant", self.tenant) == self.tenant and entry.get("run") in self.readable

    def origins(self, ref: str) -> list[str]:
        """The call ids of the runs this one reads (its own, its ancestors') whose output ``ref``
        holds; empty for one stored without them."""
        found: list[str] = []
        for entry in self._entries_of(ref):
            origin = entry.get("origin")
            if self._ours(entry) and isinstance(origin, str) and origin not in found:
                found.append(origin)
        return found

    def get(self, ref: str) -> str:
        text = None
        if _is_ref(ref) and any(self._ours(e) for e in self._entries_of(ref)):
            if self.root is None:
                text = self._memory.get(ref)
            elif (path := self.root / f"{ref}.txt").exists():
                text = path.read_text(encoding="utf-8")
        if text is None:
            raise NotFoundError(f"no stored output {ref!r}", hint="use the ref shown in the preview")
        return text

    def read(self, ref: str, offset: int = 0, length: int = 4000) -> dict[str, Any]:
        text = self.get(ref)
        offset = max(0, offset)
        chunk = text[offset : offset + length]
        end = offset + len(chunk)
        page: dict[str, Any] = {
            "ref": ref,
            "offset": offset,
            "end": end,
            "total": len(text),
            "more": end < len(text),
            "text": chunk,
        }
        if origins := self.origins(ref):
            page["relays"] = origins
        return page


def _is_ref(ref: str) -> bool:
    return ref.startswith("out_") and len(ref) == 20 and all(c in "0123456789abcdef" for c in ref[4:])
