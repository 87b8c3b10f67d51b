"""The text side of tracing: how a value is found whole inside text, which words of a request are
names, and what the run itself wrote (``Written``). Used by ``ProvenanceIndex``."""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from dataclasses import dataclass

from tether.core._confusables import skeleton
from tether.policy._provenance_display import displayed
from tether.policy._provenance_kept import kept_numbers, keypad
from tether.policy._provenance_labels import MIN_CONTAINED, MODEL, Origin, Segment, normalise, one_space
from tether.policy._provenance_values import (
    LOCAL_MARKS,
    compose,
    find_handles,
    find_links,
    public_suffix,
    unfold,
)

__all__ = [
    "ALPHA_WORD",
    "BARE",
    "EXTENSION",
    "LIMITING",
    "PLACEHOLDER",
    "STOP",
    "WORD",
    "Written",
    "actions",
    "alnum_key",
    "as_written",
    "ascii_digits",
    "asks_for",
    "contains_whole",
    "echoed",
    "given_as",
    "holds_secret",
    "in_question",
    "made_of",
    "name_forms",
    "negated",
    "occurrences",
    "party_key",
    "pieced",
    "redials",
    "redials_whole",
    "reprinted",
    "reprints",
    "reprints_whole",
    "request_names",
    "said",
    "says_what_for",
    "shared_origins",
    "shown",
    "unfolded",
]


def unfolded(text: str) -> str:
    """``text`` as a mention of a value is read, on both sides: unfolded (NFKC, case, invisible
    characters, defanged dots) and spaced once, as ``normalise`` spaces what a payment or a
    message is traced by (``one_space``): "Dave\\nJones" in a mail mentions the ``Dave Jones``
    a call gives, and the ``Dave  Jones`` it gives is the one the mail names."""
    return one_space(unfold(text))


WORD = re.compile(r"[\w@.+-]+", re.UNICODE)
ALPHA_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_STOP_WORDS = "a an the to of in on at for and or with from by is are be it this that my me i you your "
_STOP_WORDS += "please can could would will as if so do not our we us his her their them they its"
STOP = frozenset(_STOP_WORDS.split(" "))
PLACEHOLDER = re.compile(r"\{[^{}\s]{1,40}\}")
EXTENSION = re.compile(r"\.[a-z0-9]{1,5}$")  # a file name's extension


_JOINERS = "@._+-/:"  # characters that join parts of one token (an address, a link, a file name)


def contains_whole(haystack: str, needle: str) -> bool:
    """``needle`` appears in ``haystack`` as a whole: not inside a longer word, nor at the start
    or the end of a longer token, so ``smith@x.example`` is not in ``alice.smith@x.example``
    (nor in ``o'smith@x.example``: ``LOCAL_MARKS``) and ``bob@x.example`` is not in
    ``bob@x.example.co.uk``. After it, a colon or a full stop
    may end the sentence (prompts write "www.site.com.They"), but not a full stop that goes on
    into a domain's known suffix (``.co.uk``, ``.com``): that is a longer host."""
    start = 0
    n = len(needle)
    while (i := haystack.find(needle, start)) >= 0:
        start = i + 1
        before = haystack[i - 1] if i > 0 else " "
        after = haystack[i + n] if i + n < len(haystack) else " "
        if before.isalnum() or (before in _JOINERS and needle[:1].isalnum()):
            continue
        if (
            before in LOCAL_MARKS
            and "@" in needle
            and i > 1
            and (haystack[i - 2].isalnum() or haystack[i - 2] in _JOINERS)
        ):
            continue  # the end of a longer address's local part (``brien@x`` of ``o'brien@x``)
        if after.isalnum() or (after in _JOINERS and needle[-1:].isalnum() and _continues(haystack, i + n)):
            continue
        return True
    return False


_SPACES = re.compile(r"[ \t\r\n]+")


def as_written(haystack: str, needle: str) -> bool:
    """``needle`` appears whole in ``haystack`` in the same case (``contains_whole``; both
    composed and their runs of ASCII whitespace made one space, nothing else folded):
    ``q3-report.pdf`` is not written in "share Q3-Report.pdf", though it normalises alike."""
    hay, value = (_SPACES.sub(" ", compose(t)).strip(" ") for t in (haystack, needle))
    return bool(value) and contains_whole(hay, value)


_LABELS = re.compile(r"(?:\.[a-z0-9-]+)+")


def _continues(text: str, at: int) -> bool:
    """Whether the joiner at ``at`` carries the token on (``-2``, ``/path``, ``.co.uk``) rather
    than ending a sentence (a colon; a full stop before a word that is no domain suffix)."""
    if text[at] == ":":
        return False
    if text[at] != ".":
        return True
    found = _LABELS.match(text, at)
    labels = found.group(0).strip(".").split(".") if found is not None else []
    return any(public_suffix(labels[:n]) for n in range(1, len(labels) + 1))


def name_forms(text: str) -> set[str]:
    """A naming value and its spoken forms: ``grocery-list.docx`` is also ``grocery list``."""
    forms = {text}
    stem = EXTENSION.sub("", text)
    spoken = re.sub(r"[-_]+", " ", stem)
    if " " in spoken:  # a one-word stem ("list") would let any word of the request name it
        forms |= {stem, spoken}
    return forms


@dataclass(frozen=True, slots=True)
class Written:
    """A value the run itself sent to a tool (an argument leaf of a call that ran), and when:
    ``position`` is the number of observations the run had made before that call."""

    text: str  # normalised
    position: int
    links: frozenset[str] = frozenset()  # keys of the links inside it
    # A read's argument (a query, a name looked up): kept by nothing, it can come back only as
    # an echo in what that same call returned (the call's id); "" for a write, which any later
    # read may return.
    echo: str = ""
    # The task of a call whose result is a model's answer to it (a subagent's): every value the
    # answer holds is as the run had it when it gave the task, however the model reshaped it.
    answer: bool = False
    # The value names the record the write acted on (an argument declared ``role: target``): what
    # that record states when read after it may be what its store made of the run's change.
    target: bool = False
    # For a target: the other values its call gave (as given), what the record was changed to.
    given: tuple[str, ...] = ()


def echoed(w: Written, seg: Segment) -> bool:
    """Whether ``seg`` may echo the write ``w`` (``ProvenanceIndex._writes_into``): a read's echo
    only in what that call returned, a write in anything read after it; either as written or
    re-printed (``reprints``: a store regroups what it keeps, a lookup gives back what it was
    asked as it prints it, ``US13 3000 …`` as ``US133000…``). A model's answer to a task
    (``Written.answer``) echoes it whole, whatever its words."""
    if w.echo and w.echo != seg.label.call_id:
        return False
    if w.answer:
        return True
    if w.text == seg.text or contains_whole(w.text, seg.text) or _holds(seg.text, w.text):
        return True
    return reprints(seg.raw, w.text) or reprints(w.text, seg.raw) or redials(w.text, seg.raw)


def _holds(text: str, written: str) -> bool:
    """Whether ``text`` holds a write whole. A write of one character (a piece of a value
    stored one character at a time) is no word another text holds: it counts only in the
    stretches it covers with the writes beside it (``ProvenanceIndex._regions``)."""
    return len(written) >= 2 and contains_whole(text, written)


_QUOTED = re.compile(r"[\"'“”‘’«»`]([^\"'“”‘’«»`]{1,80})[\"'“”‘’«»`]")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|\s-\s)$")


def request_names(objective: str) -> set[str]:
    """Words the request uses as names: capitalised (a function word opening a sentence is
    not), or quoted. "Invite Dora" names Dora; "her website" does not make "website" a name."""
    text = compose(objective)
    names: set[str] = set()
    for m in ALPHA_WORD.finditer(text):
        word = m.group(0)
        if word[:1].isupper() and not (normalise(word) in STOP and _SENTENCE_START.search(text[: m.start()])):
            names.add(normalise(word))
    for m in _QUOTED.finditer(text):
        names |= {normalise(w) for w in ALPHA_WORD.findall(m.group(1))}
    return names


# Words that, just before a word, make it a thing named rather than an action asked for:
# determiners, possessives, quantifiers, prepositions and the adjectives that pick one item
# of a list ("the email from Lily", "my messages", "in the mail", "the latest message").
_NAMING_WORDS = "a an the this that these those my your his her their our its any each every some no all "
_NAMING_WORDS += "which what whose of from in into on about by with for per last latest recent "
_NAMING_WORDS += "new old unread first previous next other same such own"
_NAMING_BEFORE = frozenset(_NAMING_WORDS.split(" "))
# Words that, just after an action word, show it is not asked of the agent towards someone
# else: its object is the user ("tell me", "remind me"), or it names where a thing came from
# ("emails from Bob").
_AFTER_WORDS = "me myself us ourselves from"
_NAMING_AFTER = frozenset(_AFTER_WORDS.split(" "))


def asks_for(text: str, phrase: str) -> bool:
    """Whether the (normalised) request ``text`` uses ``phrase`` as an action it asks for: the
    phrase stands whole, and at least once neither a determiner, possessive, quantifier,
    preposition or list adjective stands just before it ("what is in *the email* from Lily"
    names a mail, "*send* the report" asks for one), nor the user or a source just after it
    ("*tell me* what it says" asks for an answer; "*messages from* Bob" names messages), nor
    does it stand in a clause that asks a question ("did Bob *send* it?", "how do I *share* a
    file?"; "can you *send* it?" is a request), nor is it refused in its clause ("*don't delete*
    anything", "never send", "no need to share"; "don't forget to" reminds). A word the request
    only uses for something else never asks for the effect."""
    return bool(actions(text, phrase))


def actions(text: str, phrase: str) -> list[tuple[int, int]]:
    """Where the (normalised) request ``text`` uses ``phrase`` as an action (``asks_for``)."""
    words = normalise(phrase)
    found: list[tuple[int, int]] = []
    for m in re.finditer(rf"(?<![\w'’-]){re.escape(words)}(?![\w'’-])", text) if words else ():
        near = ["", "", *_WORDS_BEFORE_ALL.findall(text, max(0, m.start() - 80), m.start())][-2:]
        prior, after = near[1], (a.group(1) if (a := _WORDS_AFTER.match(text, m.end())) else "")
        if prior in _NAMING_BEFORE or prior.endswith(("'s", "’s")) or after in _NAMING_AFTER:
            continue
        opening = max((c.end() for c in _CLAUSE_END.finditer(text, 0, m.start())), default=0)
        clause = _after_joiner(_WORDS_BEFORE_ALL.findall(text, opening, m.start())[-_NEGATION_REACH:])
        at = next((i for i in range(len(clause)) if _negates(clause[: i + 1])), len(clause))
        refused = at < len(clause) and not set(clause[at:]) & _REMINDERS and after not in LIMITING
        if not in_question(text, m.start(), m.end()) and not refused:  # "don't / not to send"
            found.append(m.span())
    return found


def said(text: str, phrase: str) -> bool:
    """Whether the (normalised) request ``text`` says ``phrase`` (a choice: "monthly") at least
    once not negated (``negated``: "pay it once, not as a standing order" chooses none)."""
    words = normalise(phrase)
    pattern = rf"(?<!\w){re.escape(words)}(?!\w)"
    return bool(words) and any(not negated(text, m.start()) for m in re.finditer(pattern, text))


def negated(text: str, start: int) -> bool:
    """Whether a negation governs the word at ``start`` of the (normalised) ``text`` (``said``)."""
    opening = max((c.end() for c in _CLAUSE_END.finditer(text, 0, start)), default=0)
    return _negates(_after_joiner(_WORDS_BEFORE_ALL.findall(text, opening, start)[-_NEGATION_REACH:]))


def _negates(words: list[str]) -> bool:
    """Whether ``words`` hold a negation: one of ``_NEGATIONS``, a word ending in "n't", or
    "rather than" / "instead of"."""
    pairs = zip(["", *words], words, strict=False)
    return any(w in _NEGATIONS or w.endswith(("n't", "n’t")) or (p, w) in _NEGATING_PAIRS for p, w in pairs)


def _after_joiner(words: list[str]) -> list[str]:
    """The words after the last one that joins a new clause ("not weekly *but* monthly")."""
    cut = max((i + 1 for i, w in enumerate(words) if w in _CLAUSE_JOINERS), default=0)
    return words[cut:]


# Words that make a refusal a limit ("no more than 100", "don't pay over 100", "not less than 50").
_LIMIT_WORDS = "more most over above exceed exceeds exceeding higher greater beyond max maximum "
LIMITING = frozenset((_LIMIT_WORDS + "less least under below lower fewer min minimum").split(" "))
_NEGATION_WORDS = "not no never without nor neither cannot dont none nothing stop cancel avoid"
_NEGATIONS = frozenset(_NEGATION_WORDS.split(" "))
_NEGATING_PAIRS = frozenset([("rather", "than"), ("instead", "of")])
_CLAUSE_JOINERS = frozenset(["but", "and", "or", "then", "so"])
_NEGATION_REACH = 4  # words before a phrase where a negation still governs it
_REMINDERS = frozenset(["forget", "fail", "hesitate", "neglect", "miss"])  # "do not forget to send"
_WORDS_BEFORE_ALL = re.compile(r"[\w'’]+")


def in_question(text: str, start: int, end: int) -> bool:
    """Whether the span stands in a clause of a question that opens with a question word or
    an auxiliary ("what", "did", "is"), not with a request ("can you", "please")."""
    stop = _SENTENCE_END.search(text, end)
    if stop is None or stop.group(0) != "?":
        return False
    opening = max((m.end() for m in _CLAUSE_END.finditer(text, 0, start)), default=0)
    clause = _CLAUSE_JOIN.sub("", text[opening:start]).split()
    return bool(clause) and clause[0] in _QUESTION_OPENERS


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")  # not the dot of a file name or a site
_CLAUSE_END = re.compile(r"[.!?,;:](?=\s|$)|\n")
_CLAUSE_JOIN = re.compile(r"^\s*(?:(?:and|then|so|also|but|or)\s+)*")
_OPENERS = "what which who whom whose when where why how did does do has have had is are was were am"
_QUESTION_OPENERS = frozenset(_OPENERS.split(" "))


_WORDS_AFTER = re.compile(r"\s+([\w'’]+)")


def says_what_for(user_text: str, argument: str, value: str) -> bool:
    """Whether the request (``user_text``, normalised) gives ``value`` as what the secret
    argument is for: a word of the argument's name (``new_password``: password) stands before
    the value with nothing between them but words that join the two ("change my password to
    X", "the password: X", "password is now X"). The word elsewhere is not enough, nor the word
    in a clause before the value however it is cut off (a dash, a colon, a line, "while",
    "so"): "keep my password - pay DE89…" sets no password to the account."""
    words = frozenset(
        w for w in re.split(r"[\W_]+", argument.lower()) if len(w) >= 3 and w not in {"new", "the"}
    )
    return given_as(user_text, words, frozenset(), value)


def given_as(user_text: str, words: frozenset[str], also: frozenset[str], value: str) -> bool:
    """Whether one of ``words`` stands before ``value`` in ``user_text`` with only joining words
    (or words of ``also``: the rest of a field's name) between them (see ``says_what_for``)."""
    text, needle = user_text, normalise(value)
    at = text.find(needle) if needle else -1
    while at >= 0:
        whole = contains_whole(text[max(0, at - 1) : at + len(needle) + 1], needle)
        for w in words if whole else ():
            said = [m.end() for m in re.finditer(rf"(?<!\w){re.escape(w)}(?!\w)", text[:at])]
            between = text[said[-1] : at] if said else ""
            gap = re.findall(r"\w+", between)
            if said and len(gap) <= 4 and set(gap) <= _JOINING | also and not _CUT.search(between):
                return True
        at = text.find(needle, at + 1)
    return False


# What may stand between a secret's name and its value: "to", "is now", "should be", "set to".
_JOINING = frozenset(
    {"to", "is", "as", "be", "now", "will", "should", "shall", "must", "into", "become", "becomes"}
    | {"it", "my", "the", "new", "set"}
)
# Punctuation that ends a clause between them (a colon or an equals sign gives the value; a
# sentence's end, a semicolon, a comma, a bracket or a line does not).
_CUT = re.compile(r"[.!?;,()\[\]{}]")


BARE = re.compile(r"[\W_]+")  # what is no letter nor digit
_DIGIT = re.compile(r"(?![0-9])\d")


@functools.lru_cache(maxsize=512)
def shown(text: str) -> str:
    """``text`` as its reader sees it, beside ``unfolded``: HTML character references rendered
    (``&#104;`` shows ``h``), a right-to-left override drawn and marks on letters left out
    (``displayed``), digits of any script as ASCII, look-alike letters as those they imitate
    (``skeleton``: a Cyrillic ``е`` in ``huntеr2``). Compared with another text's ``shown``."""
    return skeleton(ascii_digits(unfolded(displayed(html.unescape(text) if "&" in text else text))))


def ascii_digits(text: str) -> str:
    """``text`` with each digit of another script (``٤``, ``४``) as the ASCII digit it is."""
    return _DIGIT.sub(lambda m: str(unicodedata.decimal(m.group(0))), text)


def holds_secret(secret: str, text: str, bare: str) -> bool:
    """Whether ``secret`` stands in ``text``: from ``MIN_CONTAINED`` characters anywhere, one with
    a letter also spaced or punctuated otherwise (``bare``: ``hunter2 Vx9`` is ``hunter2-Vx9``; a
    figure keeps its own form), or its words each a word of ``text``, wherever and in whatever
    order (``_in_pieces``), or cut anywhere into words of ``text`` (``_in_parts``); a shorter one
    with a digit (a PIN) as a word of its own, its characters read across a few spaces or marks
    between them, never glued to another word."""
    if len(secret) >= MIN_CONTAINED:
        if secret in text:
            return True
        stripped = BARE.sub("", secret)
        if len(stripped) >= MIN_CONTAINED and any(c.isalpha() for c in stripped) and stripped in bare:
            return True
        return _in_pieces(secret, text) or _in_parts(secret, text)
    if len(secret) < 3 or not any(c.isdigit() for c in secret):
        return False
    spaced = r"[\W_]{0,3}".join(map(re.escape, secret))  # "4 8 2 1", "48-21" are the code 4821
    return re.search(rf"(?<![^\W_]){spaced}(?![^\W_])", text) is not None


_ALNUM = re.compile(r"[^\W_]+")


def _in_pieces(secret: str, text: str) -> bool:
    """Whether ``secret``, made of two words or more (runs of letters and digits, three
    characters at least, ``MIN_CONTAINED`` together), has each of them standing as a word of
    ``text``: "part one: hunter2 ... part two: Vx9" is ``hunter2-Vx9`` told in pieces."""
    words = [w for w in _ALNUM.findall(secret) if len(w) >= 3]
    if len(words) < 2 or sum(map(len, words)) < MIN_CONTAINED:
        return False
    return all(re.search(rf"(?<![^\W_]){re.escape(w)}(?![^\W_])", text) for w in words)


_PARTS = 128  # the longest secret read as told in parts: more than a key or a password needs


def _in_parts(secret: str, text: str) -> bool:
    """Whether ``secret`` (a letter in it, ``MIN_CONTAINED`` to ``_PARTS`` letters and digits) is
    its letters and digits cut anywhere into words of ``text``, wherever and in whatever order:
    "first hunt, then er2-Vx9" or "the key is 2pL7v, after Xk9mQ" tell ``hunter2-Vx9`` and
    ``Xk9mQ2pL7v`` to a reader who joins them, as ``_in_pieces`` reads a secret cut between its
    words. Each part two characters at least, and at most one part for every three characters of
    it (a key in two or three parts; the short words of prose do not spell a secret)."""
    whole = BARE.sub("", secret)
    size = len(whole)
    if not MIN_CONTAINED <= size <= _PARTS or not any(c.isalpha() for c in whole):
        return False
    words = {*_ALNUM.findall(text), *(BARE.sub("", w) for w in text.split())}  # "hunter2-V" too
    parts = {w for w in words if 2 <= len(w) < size and w in whole}
    most = max(2, size // 3)
    fewest = [0] + [most + 1] * size  # the fewest parts that make each prefix of ``whole``
    for start in range(size):
        if fewest[start] >= most:
            continue
        for part in parts:
            end = start + len(part)
            if whole.startswith(part, start) and fewest[start] + 1 < fewest[end]:
                fewest[end] = fewest[start] + 1
    return fewest[size] <= most


@functools.lru_cache(maxsize=8192)
def reprinted(text: str, *, bare: bool = False) -> str:
    """``text`` as a store that re-prints what it keeps may give it back, read as its words:
    character references undone (``&amp;``, ``&#39;``), unfolded (NFKC, case, invisible
    characters), its runs of letters and digits one space apart — whatever stood between them
    (an escape, the ``>`` quoting a line, spacing, punctuation) left out; ``bare``: no space."""
    words = _ALNUM.findall(unfold(html.unescape(text) if "&" in text else text))
    return ("" if bare else " ").join(words)


def reprints(held: str, text: str) -> bool:
    """Whether ``text`` holds ``held`` as such a store prints it (``reprinted``): its letters and
    digits in order, starting and ending where words do, the spaces between them anywhere
    (``4081 7810 0999`` is ``408178100999`` regrouped). Two characters at least."""
    h = reprinted(held, bare=True)
    if len(h) < 2 or h not in reprinted(text, bare=True):
        return False
    return re.search(r"(?<!\S)" + " ?".join(map(re.escape, h)) + r"(?!\S)", reprinted(text)) is not None


# A phone number as written or printed: digits with the spaces, dots, dashes and brackets
# between them, a "+" before; seven digits or more (``_dialled``).
_DIALLED = re.compile(r"(?<![\w+])\+?\(?\d[\d ()./-]{5,}\d(?![\d])")
_COUNTRY = 3  # digits of a country code, at most


def redials(written: str, text: str) -> bool:
    """Whether ``text`` holds a phone number of ``written`` as a store that keeps numbers in
    another dialling form gives it back: ``020 7946 0958`` as ``+442079460958`` (the trunk
    ``0`` dropped, a country code put before), or the other way round. Their digits, leading
    zeros (a trunk or an international prefix) left out, are the same, or one ends with the
    other and a country code (three digits at most) stands before it."""
    mine = _dialled(written.upper())  # a write is held case-folded: a vanity number's capitals
    if not mine:
        return False
    for other in _dialled(text):
        for number in mine:
            short, long = sorted((number, other), key=len)
            if long.endswith(short) and len(long) - len(short) <= _COUNTRY:
                return True
    return False


def redials_whole(written: str, value: str) -> bool:
    """Whether ``value`` is all of ``written`` as such a book gives it back (``redials``): each
    of them one phone number and nothing else (``+1-800-FLOWERS`` kept as ``+18003569377``).
    Traced as written then: the number the request gave in its letters is still the user's."""
    return _one_number(written) and _one_number(value) and redials(written, value)


def _one_number(text: str) -> bool:
    t = text.strip().upper()
    return _DIALLED.fullmatch(t) is not None or kept_numbers(t) == [t]


@functools.lru_cache(maxsize=4096)
def _dialled(text: str) -> frozenset[str]:
    """The phone numbers ``text`` holds, as their digits without leading zeros (seven or more):
    also as a book that keeps numbers as E.164 keeps them (``kept_numbers``: ``+44ー7700ー900123``,
    ``+44:7700:900:123``; ``1-800-FLOWERS`` as its keypad's digits)."""
    printed = [m.group(0) for m in _DIALLED.finditer(text)]
    kept = [keypad(n) for n in kept_numbers(text)]
    found = (re.sub(r"\D", "", n).lstrip("0") for n in (*printed, *kept))
    return frozenset(d for d in found if len(d) >= 7)


def reprints_whole(written: str, value: str) -> bool:
    """Whether ``value`` is all of ``written`` as a store re-prints it (``reprinted``: the same
    letters and digits) and names the same addresses, accounts and links: regrouping a figure
    keeps it, moving an ``@`` or a dot makes another destination (``bob.partner@business.example``
    is not ``bob@partner-business.example``, whose letters it repeats)."""
    if reprinted(written, bare=True) != reprinted(value, bare=True):
        return False
    return _named(written) == _named(value)


def _named(text: str) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(find_handles(text)), frozenset(link.key for link in find_links(text))


def occurrences(text: str, needle: str) -> list[int]:
    """Every index where ``needle`` starts in ``text`` (overlapping ones too)."""
    out: list[int] = []
    i = text.find(needle) if needle else -1
    while i >= 0:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


def pieced(text: str, start: int, end: int, writes: list[Written]) -> set[Written] | None:
    """The writes, each standing whole in ``text[start:end]`` (no letter or digit beside it), that
    make up most of its letters and digits (more than half, and ``MIN_CONTAINED`` or more): a
    value a store composed of pieces the run wrote, each too short to be a stretch of its own,
    with what it puts between or around them (``US13 3000 0001 …`` of ``US13``, ``3000``…;
    ``+1 (415) 555-0199`` of ``415``, ``555`` and ``0199``). None where they do not: the
    source's own text, which a short write may repeat by chance."""
    need = {i for i in range(start, end) if text[i].isalnum()}
    covered: set[int] = set()
    used: set[Written] = set()
    for w in writes:
        if not any(c.isalnum() for c in w.text):
            continue
        i = text.find(w.text, start, end)
        while i >= 0:
            j = i + len(w.text)
            if not (i > 0 and text[i - 1].isalnum()) and not (j < len(text) and text[j].isalnum()):
                covered.update(k for k in range(i, j) if k in need)
                used.add(w)
            i = text.find(w.text, i + 1, end)
    return used if len(covered) >= MIN_CONTAINED and 2 * len(covered) > len(need) else None


def made_of(value: str, asked: list[Written]) -> list[Written]:
    """The arguments of a read (its echoes, ``Written.echo``) that make up most of ``value``'s
    letters and digits (more than half, and ``MIN_CONTAINED`` or more), each found as its letters
    and digits (``reprinted``), glued to others or not: a lookup's answer computed from what it
    was asked (an IBAN from a sort code and an account number, an address from a name and a
    domain). Empty where they do not: the source's own data, which may repeat a word it was
    asked (a city in a hotel's link)."""
    bare = reprinted(value, bare=True)
    covered: set[int] = set()
    used: list[Written] = []
    for w in asked:
        piece = reprinted(w.text, bare=True)
        found = occurrences(bare, piece) if len(piece) >= 2 else []
        for i in found:
            covered.update(range(i, i + len(piece)))
        used += [w] if found else []
    return used if len(covered) >= MIN_CONTAINED and 2 * len(covered) > len(bare) else []


def shared_origins(found: list[list[Origin]]) -> list[Origin]:
    """The origins of a value made of several parts (``found``: each part's origins) that every
    part shares by class: no part lends another its trust. None shared: composed (nowhere)."""
    common = set.intersection(*({o.trust for o in f} for f in found)) if found else set()
    return [o for f in found for o in f if o.trust in common] or [Origin("nowhere", MODEL, "exact")]


_PARTY_DIGITS = 8  # as ``find_numbers``: a number that may name a party


# Groups of digits with at most one short word between each two (``000 and 123, 456``): a number.
_WORDED = re.compile(r"\d+(?:(?:[^\w]+|[^\w]*[^\W\d_]{1,5}[^\w]+)\d+)+")  # one reading


def party_key(value: str) -> str:
    """The letters and digits of ``value`` (digits of any script as ASCII, case folded) when they
    make a party a write's content is judged for: a number of eight digits or more
    (``find_numbers``), or an account (``find_handles``: an IBAN); else empty. ``000, 123, 456,
    789`` and ``US13;3000;0001;…`` are keys; an address, a link, a name are not. Groups of
    digits with one short word between each two (``000 and 123 and 456 and 789``) are the
    number their digits make: a payee's tool that keeps the digits pays it."""
    key = alnum_key(value)
    if key.isdigit():
        return key if len(key) >= _PARTY_DIGITS else ""
    folded = ascii_digits(unfold(value)).strip()
    if _WORDED.fullmatch(folded):
        digits = "".join(c for c in folded if c.isdigit())
        return digits if len(digits) >= _PARTY_DIGITS else ""
    return key if find_handles(key) == [key] else ""


def alnum_key(text: str) -> str:
    """The letters and digits of ``text``, digits of any script as ASCII, case folded."""
    return "".join(c for c in ascii_digits(unfold(text)) if c.isalnum())
