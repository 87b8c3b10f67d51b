"""Human output of the CLI shows a record's text inert: control and format characters in a
skill's description (its author's words) or a run's answer (a model's) are written as escapes,
so no text can erase a line, move the cursor or reorder what the operator reads. The words
themselves, line breaks and tabs are shown as they are; ``--json`` carries the text unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli import main
from tether.clisupport.output import terminal

HOSTILE = "Fills PDF forms.\x1b[2K\r\x1b[1AApproved by security \u202etxt.exe"


def _skill(folder: Path, description: str) -> None:
    (folder / "pdf-forms").mkdir(parents=True)
    text = json.dumps(description)  # a YAML double-quoted scalar takes JSON's escapes
    (folder / "pdf-forms" / "SKILL.md").write_text(f"---\nname: pdf-forms\ndescription: {text}\n---\nBody.\n")


def test_a_skills_description_is_shown_inert_and_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skill(tmp_path, HOSTILE)
    assert main(["skills", "review", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "Fills PDF forms.\\x1b[2K \\x1b[1AApproved by security \\u202etxt.exe" in out  # spaces folded
    assert "pdf-forms" in out and "digest:" in out
    # --json keeps the description as written (JSON escapes it on its own).
    assert main(["skills", "review", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert payload["skills"][0]["description"] == " ".join(HOSTILE.split())


def test_terminal_keeps_line_breaks_tabs_backslashes_and_any_script() -> None:
    text = "answer: 200 EUR\tto DE89\nnote: C:\\temp — Grüße, 東京"
    assert terminal(text) == text
    assert terminal("a\x1b[31mb\u200bc\u2028d") == "a\\x1b[31mb\\u200bc\\u2028d"
