"""Every requirement ID of the specification is named by at least one test (and no test names
an ID the specification does not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC_CANDIDATES = [ROOT.parent / "shared" / "SPEC.md", ROOT / "docs" / "SPEC.md"]
ID = re.compile(r"^- ([A-Z]{1,2}\d+) ", re.M)
MARK = re.compile(r"spec\(([^)]*)\)")
QUOTED = re.compile(r"[\"']([A-Z]{1,2}\d+)[\"']")


def spec_ids() -> set[str]:
    for path in SPEC_CANDIDATES:
        if path.exists():
            text = path.read_text(encoding="utf-8")
            return set(ID.findall(text)) | set(re.findall(r"^- (S\d+) ", text, re.M))
    # CI and the developers' checkouts have shared/ beside the repository; elsewhere there is
    # nothing to check against.
    pytest.skip(f"SPEC.md not found in {[str(p) for p in SPEC_CANDIDATES]}")


def ids_named_by_tests() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for args in MARK.findall(path.read_text(encoding="utf-8")):
            found.update(QUOTED.findall(args))
    return found


def test_every_spec_id_has_a_test() -> None:
    missing = sorted(spec_ids() - ids_named_by_tests(), key=lambda s: (s[0], int(re.sub(r"\D", "", s))))
    assert not missing, f"SPEC IDs without a test: {', '.join(missing)}"


def test_no_test_names_an_unknown_spec_id() -> None:
    unknown = sorted(ids_named_by_tests() - spec_ids())
    assert not unknown, f"tests name IDs the SPEC does not have: {', '.join(unknown)}"
