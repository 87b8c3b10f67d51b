"""Review of a server's tools before approval: flags text that poisons a tool definition.

Three kinds of finding, each with where it was found (``description``,
``inputSchema.properties.x.description`` …):

- ``hidden_unicode``: format/control/private-use characters, Unicode tag characters,
  variation selectors: text a person reviewing cannot see but a model reads;
- ``instruction``: text addressed to the model rather than describing the tool
  ("ignore previous instructions", "<IMPORTANT>", "before using this tool, read ~/.ssh",
  "do not tell the user" …);
- ``tool_reference``: a definition naming another tool (of any configured server), a
  namespaced name (``x__y``), or telling the model to call something;
- ``invalid_schema`` / ``remote_ref``: a schema that is not valid JSON Schema, or that points
  at a document elsewhere (the host never fetches it, so the tool cannot be validated).

Findings are hints for the person approving; they never make a tool trusted. A flagged
tool is not pinned unless the reviewer accepts it by name.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

__all__ = ["Finding", "scan_definition"]


@dataclass(frozen=True, slots=True)
class Finding:
    tool: str
    kind: str  # hidden_unicode | instruction | tool_reference
    where: str
    detail: str


_INSTRUCTION_PATTERNS = [
    r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|other|system)\b",
    r"<\s*/?\s*(important|system|instructions?|secret|hidden|admin)\s*>",
    r"\bthe (assistant|model|agent|ai|llm)\s+(must|should|needs to|has to|is required to)\b",
    r"\byou (must|should|need to|have to) (always|first|also|never|not|immediately|secretly)\b",
    r"\b(always|first|before (using|calling|answering|you)|after (using|calling))\b.{0,40}"
    r"\b(call|invoke|use|run|read|send|include|pass)\b",
    r"\b(do not|don't|never)\s+(tell|mention|inform|reveal|show|disclose)\b",
    r"\b(system prompt|assistant:|as an ai|new instructions|jailbreak)\b",
    r"(~/?\.ssh|id_rsa|\.env\b|/etc/passwd|\.aws/credentials|mcp\.json|private key)",
    r"\b(this is (very )?important|critical instructions?)\b",
]
_INSTRUCTION = re.compile("|".join(f"(?:{p})" for p in _INSTRUCTION_PATTERNS), re.IGNORECASE | re.DOTALL)
_CALL = re.compile(r"\b(call|invoke|use|run)\s+(the\s+)?[`'\"]?([A-Za-z_][A-Za-z0-9_.-]*__[A-Za-z0-9_.-]+)")
_NAMESPACED = re.compile(r"\b[A-Za-z0-9-]+__[A-Za-z0-9_.-]+\b")


def _hidden(ch: str) -> bool:
    if ch in "\n\t":
        return False
    code = ord(ch)
    if 0xE0000 <= code <= 0xE007F or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return True
    return unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp")


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in a definition (keys of schema properties included), with its location."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            path = f"{where}.{k}" if where else str(k)
            if isinstance(k, str):
                yield f"{path}(key)", k
            yield from _strings(v, path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")


def scan_definition(definition: Mapping[str, Any], other_tools: Iterable[str] = ()) -> list[Finding]:
    """Flag suspicious text in one canonical tool definition.

    ``other_tools``: names of every other tool known to the host (bare and namespaced);
    a definition that mentions one of them is flagged.
    """
    name = str(definition.get("name", ""))
    others = {t for t in other_tools if t and t != name}
    findings: list[Finding] = []
    for where, text in _strings({k: v for k, v in definition.items() if k != "name"}, ""):
        hidden = sorted({f"U+{ord(c):04X}" for c in text if _hidden(c)})
        if hidden:
            findings.append(Finding(name, "hidden_unicode", where, ", ".join(hidden[:10])))
        if where.endswith("(key)"):
            continue  # property names are identifiers, not prose
        visible = "".join(c for c in text if not _hidden(c))
        m = _INSTRUCTION.search(visible)
        if m:
            findings.append(Finding(name, "instruction", where, repr(m.group(0)[:80])))
        refs = {t for t in others if re.search(rf"(?<![A-Za-z0-9_]){re.escape(t)}(?![A-Za-z0-9_])", visible)}
        refs |= {m.group(3) for m in _CALL.finditer(visible)}
        refs |= {n for n in _NAMESPACED.findall(visible) if n != name}
        if refs:
            findings.append(Finding(name, "tool_reference", where, ", ".join(sorted(refs)[:10])))
    for key in ("inputSchema", "outputSchema"):
        schema = definition.get(key)
        if schema is None:
            continue
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as err:
            findings.append(Finding(name, "invalid_schema", key, err.message[:120]))
        refs = sorted({v for w, v in _strings(schema, key) if w.endswith(".$ref") and not v.startswith("#")})
        if refs:
            findings.append(Finding(name, "remote_ref", key, ", ".join(refs[:5]) + " (never fetched)"))
    # Also the name itself: a name with hidden characters can impersonate another tool.
    if any(_hidden(c) for c in name) or not name.isascii():
        findings.append(Finding(name, "hidden_unicode", "name", "non-ASCII or hidden characters in the name"))
    return findings
