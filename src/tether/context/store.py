"""Persistence for context rewrites: frozen replacement texts and large tool outputs.

A replacement (a compressed tool result, a preview of a stored output, a compaction digest)
is decided once and frozen: the first text ever produced for a key is the only one used,
for the rest of the session and after a restart, so a resumed session rebuilds requests
byte for byte. ``FrozenStore`` keeps them in a JSON file written atomically (temp file,
fsync, rename), so a crash leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tether.errors import ConfigError, NotFoundError

__all__ = ["FrozenStore", "LargeOutputStore"]

_VERSION = 1


class FrozenStore:
    """Write-once texts by key; persisted when ``path`` is given, in memory otherwise."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._texts: dict[str, str] = {}
        self._records: dict[str, Any] = {}
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise ConfigError(f"context store {self.path} is unreadable: {err}") from None
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                raise ConfigError(f"context store {self.path} has an unknown format")
            self._texts = {str(k): str(v) for k, v in data.get("texts", {}).items()}
            self._records = dict(data.get("records", {}))

    def get(self, key: str) -> str | None:
        return self._texts.get(key)

    def freeze(self, key: str, text: str) -> str:
        """Store ``text`` under ``key`` unless a text is already frozen there; return the frozen one."""
        if key in self._texts:
            return self._texts[key]
        self._texts[key] = text
        self._save()
        return text

    def __contains__(self, key: str) -> bool:
        return key in self._texts

    def __len__(self) -> int:
        return len(self._texts)

    def record(self, key: str) -> Any:
        return self._records.get(key)

    def set_record(self, key: str, value: Any) -> None:
        """Small JSON state next to the texts (e.g. the compaction boundary, loaded tool schemas)."""
        self._records[key] = value
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps(
            {"version": _VERSION, "texts": self._texts, "records": self._records},
            ensure_ascii=False,
            sort_keys=True,
        )
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class LargeOutputStore:
    """Tool outputs too big for the context, kept outside it under a content hash.

    The model sees a preview and the reference; ``read`` pages through the full text.
    In memory when ``root`` is None.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self._memory: dict[str, str] = {}

    def put(self, text: str) -> str:
        ref = "out_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        if self.root is None:
            self._memory[ref] = text
            return ref
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{ref}.txt"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        return ref

    def get(self, ref: str) -> str:
        if not (ref.startswith("out_") and len(ref) == 20 and all(c in "0123456789abcdef" for c in ref[4:])):
            raise NotFoundError(f"no stored output {ref!r}", hint="use the ref shown in the preview")
        if self.root is None:
            if ref not in self._memory:
                raise NotFoundError(f"no stored output {ref!r}", hint="use the ref shown in the preview")
            return self._memory[ref]
        path = self.root / f"{ref}.txt"
        if not path.exists():
            raise NotFoundError(f"no stored output {ref!r}", hint="use the ref shown in the preview")
        return path.read_text(encoding="utf-8")

    def read(self, ref: str, offset: int = 0, length: int = 4000) -> dict[str, Any]:
        text = self.get(ref)
        offset = max(0, offset)
        chunk = text[offset : offset + length]
        end = offset + len(chunk)
        return {
            "ref": ref,
            "offset": offset,
            "end": end,
            "total": len(text),
            "more": end < len(text),
            "text": chunk,
        }
