"""Text addressed to the model, in any Latin-script language: found by its shape, not its phrasing.

A sentence is judged on signals that hold across languages: the model named as its subject or
called on (assist-, model-, agent-, AI/IA/KI, LLM, GPT …, without accents and case); the chat's
role markup; the conversation's machinery (instruc-, prompt, convers-, histor-, context-, secret-,
token, passw- …); an override (ignor-, overrid-, bypass, disregard); emphasis (a shouted opening
word, an exclamation mark); a target (found by the review's own checks and passed in). It is an
instruction when a role marker or a call on the model is in it, when the model is its subject and
one more signal holds, or when an override meets the machinery.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable

__all__ = ["addressed_instruction", "fold"]

# Names for the model shared by the languages written in Latin letters (loanwords, cognates).
_NAMES = (
    r"assist\w*|asist\w*|model\w*|agent\w*|ai|ia|ki|llm\w*|gpt\w*|chatgpt|claude|gemini|copilot"
    r"|chatbot\w*|bot"
)
_ADDRESSEE = re.compile(rf"^(?:{_NAMES})$")
# Called on: "Assistente: …", "Hola IA: …", "KI, …" (a name then a colon, or first and a comma).
_CALL_ON = re.compile(rf"^\W*(?:(?:\w+\W+)?(?:{_NAMES})\s*:|(?:{_NAMES})\s*,)")
# "user agent" and "user-agent" are a header, not the model.
_NOT_ADDRESSEE = re.compile(r"\buser[\s_-]?agent\b")
_MACHINERY = re.compile(
    r"instruc|instruk|instrui|istruz|prompt|convers|konvers|histor|context|kontext|\bchat|secret|secre[tc]"
    r"|segred|credenc|credent|\btoken|passw"
)
_OVERRIDE = re.compile(r"\b(?:ignor\w*|overrid\w*|bypass\w*|disregard\w*|desconsider\w*)")
_ROLE = re.compile(
    r"\[/?inst\]|<\|[a-z_]+\|>|^\s*#{1,6}\s*(?:system|instruc\w*|instruk\w*|istruz\w*)\b"
    r"|^\s*(?:system|user|assistant|human)\s*:|<\s*/?\s*(?:assist\w*|system|instruc\w*|instruk\w*|istruz\w*"
    r"|important\w*|wichtig|prompt|ai|ia|ki|llm|model\w*)\s*>",
    re.MULTILINE,
)
_SHOUT = re.compile(r"^\W*[A-ZÀ-Þ]{6,}\b\s*[:!]")
_SENTENCES = re.compile(r"(?<=[.!?;。！？])\s+|\n+")
_WORD = re.compile(r"\w+")
_SUBJECT_WORDS = 3  # the model named among a sentence's first words is the one who acts


def fold(text: str) -> str:
    """Decoded, without accents, lower-cased: how the signals are compared."""
    decoded = html.unescape(text)
    plain = unicodedata.normalize("NFKD", decoded)
    if plain.isascii():  # nothing to strip (the usual case, and a long text's)
        return plain.casefold()
    marks = {c for c in set(plain) if unicodedata.combining(c)}
    return "".join(c for c in plain if c not in marks).casefold() if marks else plain.casefold()


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCES.split(html.unescape(text)) if s.strip()]


def _addressee_position(words: list[str]) -> int | None:
    for i, word in enumerate(words):
        if _ADDRESSEE.match(word):
            return i
    return None


def addressed_instruction(text: str, has_target: Callable[[str], bool] = lambda s: False) -> str | None:
    """The first sentence of ``text`` that reads as an instruction to the model (with the
    signals that made it one), else ``None``. ``has_target(sentence)``: whether the sentence
    names where data would go (the review's URL, e-mail, path and tool checks)."""
    for sentence in _sentences(text):
        folded = _NOT_ADDRESSEE.sub(" ", fold(sentence))
        words = _WORD.findall(folded)
        signals: list[str] = []
        if _ROLE.search(folded):
            signals.append("role marker")
        elif _CALL_ON.match(folded):
            signals.append("calls on the model")
        position = _addressee_position(words)
        subject = position is not None and position < _SUBJECT_WORDS
        machinery = _MACHINERY.search(folded) is not None
        override = _OVERRIDE.search(folded) is not None
        shout = _SHOUT.search(unicodedata.normalize("NFC", sentence)) is not None or "!" in sentence
        target = has_target(sentence)
        extra = [
            name
            for name, on in (
                ("names the conversation's machinery", machinery),
                ("overrides", override),
                ("emphasis", shout),
                ("names a target", target),
            )
            if on
        ]
        if subject and extra:
            signals += ["the model is its subject", *extra]
        elif override and machinery:
            signals += ["overrides", "names the conversation's machinery"]
        if signals:
            return f"{' '.join(sentence.split())[:100]!r} ({', '.join(dict.fromkeys(signals))})"
    return None
