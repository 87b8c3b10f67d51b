"""The shape rules the library's source keeps: modules of at most 600 lines, functions of at most
80, and the formatter's layout everywhere (no lines packed by hand behind ``fmt: skip``), so that a
line count measures code rather than how tightly it was packed."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"
MODULES = sorted(SRC.rglob("*.py"))
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_the_source_tree_is_found() -> None:
    assert len(MODULES) > 100


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_a_module_keeps_its_size_and_the_formatters_layout(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    nodes = ast.walk(ast.parse(text))
    functions = [n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    sizes = {f"{f.name}@{f.lineno}": (f.end_lineno or f.lineno) - f.lineno + 1 for f in functions}
    long = {name: size for name, size in sizes.items() if size > MAX_FUNCTION_LINES}
    assert long == {}
    assert "fmt: skip" not in text and "fmt: off" not in text


def test_the_source_is_as_the_formatter_lays_it_out() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    done = subprocess.run([ruff, "format", "--check", str(SRC)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
