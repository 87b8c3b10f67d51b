"""Argument descriptions from a tool's docstring, as Pydantic AI and the OpenAI Agents SDK read
them: a Google ``Args:`` section, Sphinx ``:param name:`` fields or a NumPy ``Parameters``
section. ``split_docstring`` returns the description without that section and the description
of each argument it documents; a docstring with none of them is returned whole."""

from __future__ import annotations

import re

__all__ = ["split_docstring"]

_GOOGLE_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params)\s*:\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^\s*:\w[^:]*:")
_NUMPY_HEADER = re.compile(r"^(\s*)(Parameters|Arguments|Args)\s*$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(?::.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _joined(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def _google(lines: list[str]) -> tuple[list[str], dict[str, str]] | None:
    start = next((i for i, line in enumerate(lines) if _GOOGLE_HEADER.match(line)), None)
    if start is None:
        return None
    base = _indent(lines[start])
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    item_indent: int | None = None
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and _indent(line) <= base:
            break  # the next section, or the text after this one
        if line.strip():
            item_indent = _indent(line) if item_indent is None else item_indent
            match = _GOOGLE_ITEM.match(line.strip()) if _indent(line) == item_indent else None
            if match:
                current = found.setdefault(match.group(1), [])
                current.append(match.group(2))
            elif current is not None:
                current.append(line)
        end += 1
    return lines[:start] + lines[end:], {name: _joined(text) for name, text in found.items()}


def _sphinx(lines: list[str]) -> tuple[list[str], dict[str, str]] | None:
    found: dict[str, list[str]] = {}
    kept: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if match := _SPHINX_PARAM.match(line):
            current = found.setdefault(match.group(1), [])
            current.append(match.group(2))
            continue
        if _SPHINX_FIELD.match(line):
            current = None
        elif current is not None and line.strip() and line[:1].isspace():
            current.append(line)
            continue
        else:
            current = None
        kept.append(line)
    return (kept, {name: _joined(text) for name, text in found.items()}) if found else None


def _numpy(lines: list[str]) -> tuple[list[str], dict[str, str]] | None:
    start = next(
        (
            i
            for i, line in enumerate(lines[:-1])
            if _NUMPY_HEADER.match(line) and _NUMPY_RULE.match(lines[i + 1])
        ),
        None,
    )
    if start is None:
        return None
    base = _indent(lines[start])
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    end = start + 2
    while end < len(lines):
        line = lines[end]
        if end + 1 < len(lines) and _NUMPY_RULE.match(lines[end + 1]) and line.strip():
            break  # the next section's header
        if line.strip() and _indent(line) == base:
            match = _NUMPY_ITEM.match(line.strip())
            if match is None:
                break
            current = found.setdefault(match.group(1), [])
        elif current is not None and line.strip():
            current.append(line)
        end += 1
    return lines[:start] + lines[end:], {name: _joined(text) for name, text in found.items()}


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(description, {argument: description})``: the docstring without its parameter section,
    and what that section says of each argument. ``(doc, {})`` when it has none."""
    lines = doc.splitlines()
    for style in (_google, _numpy, _sphinx):
        parsed = style(lines)
        if parsed is not None and any(parsed[1].values()):
            kept, described = parsed
            return "\n".join(kept).strip(), {k: v for k, v in described.items() if v}
    return doc, {}
