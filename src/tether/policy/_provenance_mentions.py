"""Which of the request's mentions of a name choose it: the user's words hold a name many ways,
and only some of them ask for it. ``ProvenanceIndex`` (``_provenance``) asks this before it
counts a name, a title or a listing's name as the user's (an ``Origin("user")``).

A mention does not choose its name where:

- the request *refuses* it: a negation or a word of refusal governs it in its clause ("don't
  invite Eve", "not Riverside View", "instead of Riverside View", "avoid Eve", "except Eve",
  "I hated Riverside View", "everyone but Eve"), but not a reminder ("do not forget to invite
  Mark");
- it stands in the *content of a message* to someone else ("tell Alice that Eve said hi",
  "reply to Bob saying Eve is late", "message Carol: Eve is in", "email alice@x.example that
  bob@y.example joins", "send her an email saying …"): what the user has said, not whom or
  what the agent is to act on;
- it stands in a clause that *asks a question* about it ("Is Eve in general?", "Who is Eve?";
  "can you invite Eve?" is a request);
- it is *part of a longer name* the run read whole that the request gives ("Le Marais" inside
  the user's "Le Marais Boutique", a member "Dora" inside the user's "Dora Smith"): the user
  named the longer one, and a record someone named after a part of it is theirs, not the user's.

A plain word of the request (``user:word``, not written as a name) chooses a destination only
where the request places it as one (``placed``): beside a word for a place messages go
("the random channel", "channel random", "#random") or after a word that sends to one ("post
in random", "send it to random"). "Post a summary of what people asked" chooses no channel
named ``summary`` or ``asked``: anyone who opens a channel so named would receive the post.

A party's number is chosen only whole (``piece_of_number``): the groups ``20 7946 0958`` of the
user's ``+44 20 7946 0958``, or ``3704 0044 0532 0130 00`` of a grouped IBAN, stand in the
request on word boundaries, but a phone or a bank given them reaches another party.

An option's phrase ("edit", "monthly") chooses the option only where it is not negated, refused
or asked about, nor the user's own act ("so he can review it before *I edit* it": a first-person
subject before it, auxiliaries between), nor an action asked of the agent ("*edit* the report,
then share it": it opens its clause with no word of a permission after it, as "edit access" has),
nor part of a longer word ("non-recurring" chooses nothing recurring) (``chooses_option``).

A name the request also mentions in a way that chooses it stays the user's; a value the request
holds in no whole-word mention is left as the caller traced it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tether.policy._provenance_labels import normalise
from tether.policy._provenance_text import alnum_key, contains_whole, in_question, negated
from tether.policy._provenance_values import find_handles, find_numbers

__all__ = ["chooses_option", "chosen_in_request", "piece_of_number", "placed", "refused"]

_REFUSAL_WORDS = "not no never without nor neither cannot dont none avoid avoiding except excluding exclude "
_REFUSAL_WORDS += "skip ignore hate hated hates dislike disliked dislikes unlike besides"
_REFUSALS = frozenset(_REFUSAL_WORDS.split(" "))
_REFUSING_PAIRS = frozenset([("rather", "than"), ("instead", "of"), ("other", "than"), ("apart", "from")])
# Words after a negation that make it a reminder, not a refusal ("do not forget to invite Mark").
_REMINDERS = frozenset(["forget", "fail", "hesitate", "neglect", "miss", "only"])
_EVERYONE = frozenset(["everyone", "everybody", "anyone", "anybody", "all", "any", "anything", "everything"])
_REACH = 6  # words before a mention where a refusal still governs it
_JOINERS = frozenset(["but", "then", "so", "yet", "and", "or"])
_LISTING = frozenset(["and", "or", "nor"])  # joiners that may go on with the refused list
_CLAUSE_END = re.compile(r"[.!?,;:](?=\s|$)|\n| - ")
_TOKEN_MARKS = "@._-/+"  # marks inside one token (an address, a handle, a path)
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|\n")
_WORD = re.compile(r"[\w'’]+")
# A message to someone else, then the words it is to carry.
_MESSAGE = "tell|telling|ask|remind|inform|notify|say|write|message|reply|answer|dm|let"
_CONTENT = re.compile(rf"\b(?:{_MESSAGE})\b[^.!?;\n]*?(?:\bthat\b|\bsaying\b|:)")
# The same with a verb of mail or text, or an address between (its dots end no sentence): "email
# alice@x.example that bob@y.example said hi", "send her an email saying …", "text Bob: …".
_MAIL = rf"e-?mail|mail|text|sms|{_MESSAGE}"
_IN_SENTENCE = r"(?:[^.!?;\n]|\.(?!\s|$))*?"
_MAILED = re.compile(
    rf"\b(?:{_MAIL})\b(?:\s+(?:to\s+)?(?!to\b)[^\s,;:!?]+)?(?:\s+(?:that|saying)\b|:)"
    rf"|\b(?:{_MAIL})\b{_IN_SENTENCE}(?:\bsaying\b|\bto\s+say\b|\bletting\s+\w+\s+know\b|\bmention(?:ing)?\s+that\b)"
)
# What ends the content of a message: a new clause joined after a comma ("…, and invite Dora"),
# or "and" with an action the agent is asked for ("… the party is on and invite Eve").
_ACTIONS = "invite|add|send|post|share|book|reserve|create|delete|remove|schedule|cancel|reply|forward|pay|"
_ACTIONS += "email|e-mail|mail|message|dm|tell|ask|write"
_CONTENT_END = re.compile(
    rf",\s*(?:and|then|also|but|so|please)\b|\s(?:and|then)\s+(?:also\s+|please\s+)?(?:{_ACTIONS})\b"
    r"|[.!?;](?=\s|$)|\n"
)


def chosen_in_request(user_text: str, needle: str, longer: Iterable[str] = ()) -> bool:
    """Whether the (normalised) request ``user_text`` mentions ``needle`` at least once in a way
    that chooses it (see the module docstring). ``longer``: whole names the run read that hold
    ``needle``; a mention inside one of them the request gives does not choose ``needle``."""
    spans = _mentions(user_text, needle)
    if not spans:
        return True
    covered = _covered_by(user_text, needle, longer)
    return any(_chooses(user_text, start, end) and not _inside(start, end, covered) for start, end in spans)


# Words for a place a message, a member or a file goes (beside a plain word, they make it one)
# and words that send to the place after them (with an article or a possessive between).
_PLACES = "channel channels room rooms group groups chat chats thread threads space spaces team teams "
_PLACES += "list lists board boards folder folders workspace server forum topic stream"
_PLACE_NOUNS = frozenset(_PLACES.split(" "))
_INTO = frozenset(["in", "into", "to", "on", "onto", "at", "via"])
_ARTICLES = frozenset(["the", "a", "an", "our", "my", "your", "their", "this", "that"])
_PLACE_WORD = re.compile(r"#?[\w'’-]+")


def placed(user_text: str, word: str) -> bool:
    """Whether the (normalised) request places the plain ``word`` as a destination in some
    mention of it (see the module docstring): after ``#``, beside a place noun, or after a word
    that sends to a place, an article or possessive allowed between."""
    tokens = _PLACE_WORD.findall(user_text)
    for i, token in enumerate(tokens):
        if token.lstrip("#") != word:
            continue
        if token.startswith("#"):
            return True
        before = tokens[max(0, i - 2) : i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if nxt in _PLACE_NOUNS or (before and before[-1] in _PLACE_NOUNS):
            return True
        if before and before[-1] in _ARTICLES:
            before = before[:-1]
        if before and before[-1] in _INTO:
            return True
    return False


def piece_of_number(request: str, value: str) -> bool:
    """Whether ``value`` holds digits and the request writes its letters and digits only as a
    part of a longer number or account it states (``find_numbers``, ``find_handles``: a phone's
    or an IBAN's groups, read as one value), never as a whole one: the groups a destination
    gives of it dial or pay another party than the one the user gave."""
    key = alnum_key(value)
    if not any(c.isdigit() for c in key):
        return False
    wholes = {alnum_key(n) for n in (*find_numbers(request), *find_handles(request))}
    return key not in wholes and any(key in whole for whole in wholes)


def _chooses(text: str, start: int, end: int) -> bool:
    """Whether the mention at ``start``..``end`` may choose its name: not refused, not inside
    the content of a message, nor asked about in a question."""
    return not (_refused(text, start, end) or _reported(text, start) or in_question(text, start, end))


def _mentions(text: str, needle: str) -> list[tuple[int, int]]:
    """The occurrences of ``needle`` in ``text`` that are no part of a longer word."""
    out: list[tuple[int, int]] = []
    at = text.find(needle) if needle else -1
    while at >= 0:
        end = at + len(needle)
        before = text[at - 1] if at > 0 else " "
        after = text[end] if end < len(text) else " "
        beyond = text[end + 1] if end + 1 < len(text) else " "
        joined = before.isalnum() or before in _TOKEN_MARKS
        goes_on = after.isalnum() or (after in _TOKEN_MARKS and beyond.isalnum())
        if not (joined and needle[:1].isalnum()) and not (goes_on and needle[-1:].isalnum()):
            out.append((at, end))
        at = text.find(needle, at + 1)
    return out


def _refused(text: str, start: int, end: int) -> bool:
    """Whether a refusal governs the mention at ``start`` within its clause."""
    opening = max((m.end() for m in _CLAUSE_END.finditer(text, 0, start)), default=0)
    words = _WORD.findall(text, opening, start)
    if words[-2:-1] and words[-1] == "but" and words[-2] in _EVERYONE:
        return True  # "everyone but Eve", "all but Riverside View"
    for i in range(len(words) - 1, -1, -1):
        if words[i] in _JOINERS and not (words[i] in _LISTING and i == len(words) - 1):
            words = words[i + 1 :]
            break
    words = words[-_REACH:]
    nxt = [*words[1:], ""]
    prev = ["", *words]
    for p, w, n in zip(prev, words, nxt, strict=False):
        refusal = w in _REFUSALS or w.endswith(("n't", "n’t")) or (p, w) in _REFUSING_PAIRS
        if refusal and n not in _REMINDERS:
            return True
    return False


def refused(text: str, start: int, end: int) -> bool:
    """Whether a refusal governs the mention at ``start``..``end`` of the (folded) ``text``
    within its clause ("not the 500 EUR", "don't pay on March 4", "instead of 500")."""
    return _refused(text, start, end)


def _reported(text: str, start: int) -> bool:
    """Whether the mention at ``start`` stands in the content of a message to someone else."""
    sentence = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    for content in (_CONTENT, _MAILED):
        for m in content.finditer(text, sentence, start):
            stop = _CONTENT_END.search(text, m.end())
            if stop is None or stop.start() >= start:
                return True
    return False


def _covered_by(text: str, needle: str, longer: Iterable[str]) -> list[tuple[int, int]]:
    """Spans of ``text`` that give a longer whole name holding ``needle``."""
    spans: list[tuple[int, int]] = []
    for name in longer:
        if len(name) > len(needle) and needle in name and contains_whole(name, needle):
            spans.extend(_mentions(text, name))
    return spans


def _inside(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(s <= start and end <= e for s, e in spans)


# Words before an option's phrase that make it the user's own act: a first-person subject, with
# only auxiliaries and adverbs between ("before I edit it", "so we can edit it", "I want to edit").
_FIRST_PERSON_WORDS = "i we i'll we'll i'm we're i'd we'd i've we've let's"
_FIRST_PERSON = frozenset(_FIRST_PERSON_WORDS.split(" "))
_AUXILIARY = "can could will would shall should may might must to need needs want wants have has had "
_AUXILIARY += "am is are was were be going also still then just first later myself ourselves"
_AUXILIARIES = frozenset(_AUXILIARY.split(" "))
# Words that may open a clause before the action it asks for ("and then please edit it").
_OPENING_WORDS = "please kindly also then and so but now first just next finally"
_OPENING = frozenset(_OPENING_WORDS.split(" "))
# Words after a phrase that make it a permission granted ("edit access", "editing rights").
_GRANT_WORDS = "access right rights permission permissions privilege privileges mode role"
_GRANTS = frozenset(_GRANT_WORDS.split(" "))


def chooses_option(user_text: str, phrase: str) -> bool:
    """Whether the (normalised) request chooses the option ``phrase`` names at some mention of it
    (see the module docstring)."""
    words = normalise(phrase)
    for start, end in _mentions(user_text, words) if words else []:
        if negated(user_text, start) or _refused(user_text, start, end) or in_question(user_text, start, end):
            continue
        clause = _WORD.findall(
            user_text, max((m.end() for m in _CLAUSE_END.finditer(user_text, 0, start)), default=0), start
        )
        subject = [w.replace("’", "'") for w in clause]
        while subject and subject[-1] in _AUXILIARIES:
            subject.pop()
        if subject and subject[-1] in _FIRST_PERSON:
            continue  # the user's own act
        after = _WORD.match(user_text[end:].lstrip())
        if all(w in _OPENING for w in clause) and (after is None or after.group(0) not in _GRANTS):
            continue  # an action asked of the agent
        return True
    return False
