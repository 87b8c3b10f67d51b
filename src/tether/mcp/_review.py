"""Review of a server's tools before approval, read like an attacker would write them.

Finding kinds: ``hidden_unicode``, ``instruction`` (English patterns, and ``tether.mcp._addressed``
for any language), ``tool_reference``, ``url``, ``email``, ``secret_path``, ``encoded_text``
(decoded and scanned again), ``foreign_script``, ``invalid_schema`` and ``remote_ref``. Findings
are hints for the approver; a flagged tool is not pinned unless accepted by name.
"""

from __future__ import annotations

import functools
import html
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tether.core._schema import UnusableSchema, compile_schema
from tether.mcp._addressed import addressed_instruction
from tether.mcp._clean import hidden_kind

__all__ = [
    "SINKS",
    "Finding",
    "ToolNames",
    "decode_hidden",
    "foreign_script",
    "main_script",
    "scan_definition",
    "scan_text",
    "strings",
]


@dataclass(frozen=True, slots=True)
class Finding:
    tool: str
    kind: str  # hidden_unicode | instruction | tool_reference | url | …
    where: str
    detail: str


# Tool names that move data out or change the world: a description that names one is suspect.
SINKS = (
    "send_email",
    "send_mail",
    "send_message",
    "send_sms",
    "post_message",
    "http_request",
    "http_post",
    "http_get",
    "fetch_url",
    "web_fetch",
    "upload",
    "upload_file",
    "write_file",
    "delete_file",
    "remove_file",
    "run_command",
    "run_shell",
    "exec_command",
    "execute_command",
    "shell_exec",
    "transfer_funds",
    "make_payment",
    "create_payment",
    "curl",
    "wget",
    "netcat",
)

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
    # Addressed to the model: it is told what it now is, has or may do.
    r"\b(grants?|gives?|allows?|lets?|enables?)\s+(you|the (assistant|model|agent|ai))\b",
    r"\byou\s+(now\s+)?(have|are|can|may)\s+(now\s+)?(full\s+|unrestricted\s+)?"
    r"(access|permission|allowed|authori[sz]ed|root|admin|internet|free to)\b",
    r"\byou (are|have) (now|been)\b",
    r"\b(dear|hey|hi|attention|note to( the)?)\s+(assistant|model|agent|ai|llm|claude|gpt|chatgpt)\b",
    r"^\s*(assistant|model|agent|ai|llm)\s*[:,]",
    r"\b(remember|make sure|ensure|be sure)\s+(to|that)\b.{0,60}\b(call|send|include|pass|read|tell)\b",
    r"\bif (you are |you're )?asked\b.{0,80}\b(respond|reply|answer|say)\s+(with|that)\b",
    # The model cast in a role, or told to hand over what only it holds.
    r"\bas an? (assistant|ai|(large )?language model|model|agent|llm|chatbot)\b",
    r"\byou\s+(must|shall|are required to|are expected to)\s+(include|send|append|attach|forward|copy|"
    r"output|reveal|print|repeat|paste)\b",
    r"\b(full|entire|whole|complete)\s+(conversation|chat|dialogue|context|transcript)\b",
    r"\bconversation history\b",
]
_INSTRUCTION = re.compile(
    "|".join(f"(?:{p})" for p in _INSTRUCTION_PATTERNS), re.IGNORECASE | re.DOTALL | re.MULTILINE
)
_URL = re.compile(r"\b(?:https?|ftp|wss?)://[^\s<>\"')\]]+|\bwww\.[a-z0-9-]+\.[a-z]{2,}[^\s<>\"')\]]*", re.I)
# A lookbehind, not ``\b``: each run of name characters is tried from its start only (linear time).
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_SECRET_PATH = re.compile(
    r"(~/|\$HOME/|/home/[^/\s]+/|/root/)?\.(ssh|aws|gnupg|kube|docker|netrc|npmrc|pypirc|git-credentials|"
    r"bash_history|zsh_history|config/gcloud)\b[^\s]*|\bid_(rsa|dsa|ecdsa|ed25519)\b|/etc/(passwd|shadow|sudoers)"
    r"|(?<![\w.-])[\w.-]+\.(pem|key|p12|pfx|kdbx)\b|\bauthorized_keys\b|\bcredentials\.json\b|(^|[\s/])\.env\b",
    re.IGNORECASE,
)
_CALL = re.compile(r"\b(call|invoke|use|run)\s+(the\s+)?[`'\"]?([A-Za-z_][A-Za-z0-9_.-]*__[A-Za-z0-9_.-]+)")
_NAMESPACED = re.compile(r"\b(?<![A-Za-z0-9-])[A-Za-z0-9-]+__[A-Za-z0-9_.-]+\b")


def strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in a definition (keys of schema properties included), with its location."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            path = f"{where}.{k}" if where else str(k)
            if isinstance(k, str):
                yield f"{path}(key)", k
            yield from strings(v, path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, f"{where}[{i}]")


def _tag_text(text: str) -> str:
    return "".join(chr(ord(c) - 0xE0000) for c in text if 0xE0020 <= ord(c) <= 0xE007E)


# Runs of text that may be encoded prose: base64 (standard or URL-safe), hex, %-escapes, \u/\x escapes.
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){12,}(?![0-9A-Fa-f])")
# A run of URL characters with at least three %-escapes, matched in one pass (linear time).
_PERCENT = re.compile(r"(?:[A-Za-z0-9._~+-]|%[0-9A-Fa-f]{2})+")
_ESCAPES = re.compile(r"(?:\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}){4,}")


def _readable(raw: bytes) -> str | None:
    """Decoded bytes that read as prose (letters and spaces, no binary), else ``None``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 8 or not any(c.isspace() for c in text):
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t")
    letters = sum(1 for c in text if c.isalpha())
    return text if printable >= 0.95 * len(text) and letters >= 0.5 * len(text) else None


def decode_hidden(text: str) -> list[tuple[str, str]]:
    """Prose hidden in an encoding, as ``(encoding, decoded text)``, whatever its language."""
    import base64
    import binascii
    from urllib.parse import unquote_to_bytes

    found: list[tuple[str, str]] = []
    for m in _BASE64.finditer(text):
        token = m.group(0)
        if token.isalpha() and (token.islower() or token.isupper()):
            continue  # one long word
        alt = b"-_" if ("-" in token or "_" in token) else None
        try:
            raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=alt, validate=True)
        except (binascii.Error, ValueError):
            continue
        if (decoded := _readable(raw)) is not None:
            found.append(("base64", decoded))
    for m in _HEX.finditer(text):
        if (decoded := _readable(bytes.fromhex(m.group(0)))) is not None:
            found.append(("hex", decoded))
    for m in _PERCENT.finditer(text):
        if m.group(0).count("%") >= 3 and (decoded := _readable(unquote_to_bytes(m.group(0)))) is not None:
            found.append(("percent-encoding", decoded))
    for m in _ESCAPES.finditer(text):
        try:
            raw = m.group(0).encode("ascii").decode("unicode_escape").encode("utf-8")
        except (UnicodeDecodeError, UnicodeEncodeError):
            continue
        if (decoded := _readable(raw)) is not None:
            found.append(("escapes", decoded))
    return found


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL") else first


def main_script(texts: Iterable[str]) -> str:
    """The writing system most of a server's text is in (``LATIN`` when it has no letters)."""
    counts = _letters_by_script(Counter(ch for text in texts for ch in text))
    return max(counts, key=lambda k: counts[k]) if counts else "LATIN"


def _letters_by_script(chars: Counter[str]) -> dict[str, int]:
    """How many letters of each script ``chars`` (character counts) hold: each distinct
    character named once, so a long text costs one pass in C and a lookup per distinct letter."""
    counts: dict[str, int] = {}
    for ch, n in chars.items():
        if ch.isalpha():
            counts[_script(ch)] = counts.get(_script(ch), 0) + n
    return counts


def foreign_script(text: str, main: str = "LATIN") -> str | None:
    """A passage in a script other than ``main`` (Latin is ordinary anywhere), or a word mixing
    scripts (look-alike letters)."""
    for word in re.findall(r"\w+", text):
        if word.isascii():  # ASCII letters are all Latin
            continue
        scripts = {_script(c) for c in word if c.isalpha()}
        if len(scripts) > 1:
            return f"a word mixing {' and '.join(sorted(scripts))} letters: {word[:40]!r}"
    counts = _letters_by_script(Counter(text))
    if not (other := {k: n for k, n in counts.items() if n >= 3 and k not in (main, "LATIN")}):
        return None
    script = max(other, key=lambda k: other[k])
    sample = "".join(c if (not c.isalpha() or _script(c) == script) else " " for c in text)
    return f"{script} text in a server written in {main}: {' '.join(sample.split())[:80]!r}"


_QUOTED_FIELD = re.compile(r"`[^`\s]{1,60}`")


_PART = r"[A-Za-z0-9_]+"
_DOTTED = re.compile(rf"{_PART}(?:[-.]{_PART})*")  # a run of words joined by - or .
_JOINT = re.compile(r"([-.])")
_CALLED = re.compile(r"\b(?:call|invoke|run|trigger)\s+(?:the\s+)?[`'\"]?", re.I)


class ToolNames:
    """Tool names found in text in one pass however many there are (no regex per name), each as
    a whole word in any case."""

    def __init__(self, others: Iterable[str], siblings: Iterable[str] = ()) -> None:
        self.others = frozenset(t for t in others if t) | frozenset(SINKS)
        self.siblings = frozenset(t for t in siblings if t)
        self._simple: dict[str, set[str]] = {}
        self._other: list[str] = []
        self._parts = 1
        self._longest = max(map(len, self.others | self.siblings), default=0)
        for name in self.others | self.siblings:
            if _DOTTED.fullmatch(name):
                self._simple.setdefault(name.lower(), set()).add(name)
                self._parts = max(self._parts, len(_JOINT.split(name)) // 2 + 1)
            else:
                self._other.append(name)

    def found(self, text: str, *, at: int | None = None) -> set[str]:
        """Every name in ``text`` (``at``: only a name starting at that position)."""
        hits: set[str] = set()
        lowered = text.lower()
        runs = _DOTTED.finditer(lowered) if at is None else filter(None, [_DOTTED.match(lowered, at)])
        for run in runs:
            pieces = _JOINT.split(run.group(0))
            words, joints = pieces[0::2], pieces[1::2]
            for i in range(1 if at is not None else len(words)):
                joined = words[i]
                for j in range(i, min(len(words), i + self._parts)):
                    joined = joined if j == i else f"{joined}{joints[j - 1]}{words[j]}"
                    hits |= self._simple.get(joined, set())
        for name in self._other:  # names of other shapes (rare): a substring test first
            if name.lower() in lowered:
                whole = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", re.I)
                if whole.search(text) if at is None else whole.match(text, at):
                    hits.add(name)
        return hits

    def called_siblings(self, text: str) -> set[str]:
        """The server's own tools the text tells the model to call, invoke, run or trigger."""
        if not self.siblings:
            return set()
        width = self._longest + 1  # enough for any name and the character after it
        called = (self.found(text[m.end() : m.end() + width], at=0) for m in _CALLED.finditer(text))
        return {n for names in called for n in names if n in self.siblings}


def _target_check(names: ToolNames) -> Callable[[str], bool]:
    """Whether a sentence names where data would go (for ``addressed_instruction``)."""

    def named(sentence: str) -> bool:
        checks = (_URL, _EMAIL, _SECRET_PATH, _QUOTED_FIELD)
        return any(c.search(sentence) for c in checks) or bool(names.found(sentence))

    return named


def scan_text(
    tool: str,
    where: str,
    text: str,
    others: Iterable[str] | ToolNames = (),
    *,
    prose: bool = True,
    script: str = "LATIN",
    siblings: Iterable[str] = (),
    _depth: int = 0,
) -> list[Finding]:
    """Flag one piece of server-written text (a description, a schema string, instructions)."""
    findings: list[Finding] = []
    # Each distinct character judged once (a long text has few): the set is built in C.
    hiding = {c for c in set(text) if hidden_kind(c)}
    if hidden := sorted(f"U+{ord(c):04X}" for c in hiding):
        detail = ", ".join(hidden[:10])
        if tags := _tag_text(text):
            detail += f" (hidden tag text: {tags[:200]!r})"
        findings.append(Finding(tool, "hidden_unicode", where, detail))
    if not prose:
        return findings
    # As a model reads it: compatibility forms folded, HTML entities ('&#105;gnore') decoded.
    visible = unicodedata.normalize(
        "NFKC", html.unescape("".join(c for c in text if c not in hiding) if hiding else text)
    )
    names = others if isinstance(others, ToolNames) else ToolNames(others, siblings)
    if m := _INSTRUCTION.search(visible):
        findings.append(Finding(tool, "instruction", where, repr(m.group(0)[:80])))
    elif (addressed := addressed_instruction(visible, _target_check(names))) is not None:
        findings.append(Finding(tool, "instruction", where, addressed))
    # Naming its own tools is ordinary; telling the model to call one is a reference.
    refs = (names.found(visible) & names.others) | names.called_siblings(visible)
    refs.discard(tool)
    refs |= {m.group(3) for m in _CALL.finditer(visible)}
    refs |= {n for n in _NAMESPACED.findall(visible) if n != tool}
    if refs:
        findings.append(Finding(tool, "tool_reference", where, ", ".join(sorted(refs)[:10])))
    if urls := sorted(set(_URL.findall(visible))):
        findings.append(Finding(tool, "url", where, ", ".join(u[:100] for u in urls[:5])))
    if emails := sorted(set(_EMAIL.findall(visible))):
        findings.append(Finding(tool, "email", where, ", ".join(emails[:5])))
    if paths := sorted({m.group(0).strip() for m in _SECRET_PATH.finditer(visible)}):
        findings.append(Finding(tool, "secret_path", where, ", ".join(p[:80] for p in paths[:5])))
    if (mixed := foreign_script(visible, script)) is not None:
        findings.append(Finding(tool, "foreign_script", where, mixed))
    if _depth < 2:
        for encoding, decoded in decode_hidden(visible):
            findings.append(Finding(tool, "encoded_text", where, f"{encoding}: {decoded[:120]!r}"))
            where_decoded = f"{where} ({encoding}-decoded)"
            findings += scan_text(tool, where_decoded, decoded, names, script=script, _depth=_depth + 1)
    return findings


@functools.lru_cache(maxsize=256)
def _schema_problem(schema: str, intake: bool) -> str | None:
    """Why the host could not use a schema (canonical JSON): compiled by its one engine, as a
    call would (its own dialect's meta-schema: a draft-07 schema is no invalid 2020-12 one);
    cached: tools often share one. A reference outside it is ``remote_ref``'s finding."""
    try:
        compile_schema(json.loads(schema), intake=intake)
    except UnusableSchema as err:
        if "points outside the schema" in str(err):
            return None
        return str(err).removeprefix("invalid schema at ")[:160]
    return None


def scan_definition(
    definition: Mapping[str, Any],
    other_tools: Iterable[str] | ToolNames = (),
    *,
    script: str = "LATIN",
    siblings: Iterable[str] = (),
) -> list[Finding]:
    """Flag suspicious text in one canonical tool definition. ``other_tools``: every other tool
    known to the host; ``script``: the server's own (``main_script``); ``siblings``: the same
    server's tools, flagged only when the text tells the model to call one."""
    name = str(definition.get("name", ""))
    others = other_tools if isinstance(other_tools, ToolNames) else ToolNames(other_tools, siblings)
    findings: list[Finding] = []
    for where, text in strings({k: v for k, v in definition.items() if k != "name"}, ""):
        # Not prose: property names, schema identifiers, and what no model reads (execution, icons, _meta).
        prose = not where.endswith(("(key)", ".$ref", ".$schema", ".$id")) and not where.startswith(
            ("execution", "icons", "_meta")
        )
        findings += scan_text(name, where, text, others, prose=prose, script=script)
    for key in ("inputSchema", "outputSchema"):
        schema = definition.get(key)
        if schema is None:
            continue
        text = json.dumps(schema, sort_keys=True, default=str)
        if (problem := _schema_problem(text, key == "inputSchema")) is not None:
            findings.append(Finding(name, "invalid_schema", key, problem))
        refs = sorted({v for w, v in strings(schema, key) if w.endswith(".$ref") and not v.startswith("#")})
        if refs:
            findings.append(Finding(name, "remote_ref", key, ", ".join(refs[:5]) + " (never fetched)"))
    # Also the name itself: a name with hidden characters can impersonate another tool.
    if any(hidden_kind(c) for c in name) or not name.isascii():
        findings.append(Finding(name, "hidden_unicode", "name", "non-ASCII or hidden characters in the name"))
    return findings
