"""Text addressed to the model, in whatever language: found by its shape, not by its phrasing.

A tool's description says what the tool does; an injected instruction talks to the model
about the model, the conversation or what to do with it. The review's English patterns
(``tether.mcp._review``) name the common English phrasings; this module finds the same kind
of sentence in any language written in Latin letters, with no word list per language. A
sentence is judged on signals that hold across languages:

- **addressee**: the model is named as the one who acts: in the first words of the sentence
  (its subject), or called on (``Assistente:``, ``Liebe KI,``). The names for it are the
  same across languages, as loanwords or cognates (assist-, model-, agent-, AI/IA/KI, LLM,
  GPT, chatbot …), compared without accents and case;
- **role marker**: the chat's own markup (``[INST]``, ``<|im_start|>``, ``system:`` at the
  start of a line, a ``<tag>`` naming the model or its instructions): never part of a
  description, whatever the language;
- **machinery**: the conversation's own parts, named by their shared stems (instruc-/instruk-/
  istruz-, prompt, convers-/konvers-, histor-, context-/kontext-, chat, secret-/segred-,
  credential-, token, passw-);
- **override**: the cognates of "ignore" and "override" (ignor-, overrid-, bypass, disregard);
- **emphasis**: an all-capital word of six letters or more opening the sentence
  (``IMPORTANTE:``, ``WICHTIG!``), or an exclamation mark: a description informs, it does not
  shout;
- **target**: where data would go (a URL, an e-mail address, a credential path, another tool,
  a quoted field name), found by the review's own checks and passed in.

A sentence is an instruction when a role marker or a call on the model is in it, when the
model is its subject and one more signal holds, or when an override meets the machinery.
Text is decoded before it is judged (HTML entities here; base64, hex, %- and ``\\u`` escapes
by the review, which scans what they hide again), and writing systems other than Latin are
the review's ``foreign_script`` finding: a passage the reviewer may not read is flagged as
such, whatever it says.
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
    return "".join(c for c in plain if not unicodedata.combining(c)).casefold()


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
