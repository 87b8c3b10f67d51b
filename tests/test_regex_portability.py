"""Patterns the library compiles with ``re`` read alike on every Python it supports (3.11.0 on).

CPython before 3.11.4 matched some patterns with possessive quantifiers (``*+``, ``++``, ``?+``,
``{m,n}+``) or atomic groups (``(?>…)``) wrongly: on Debian 12's Python 3.11.2 the provenance
finders read the domain of ``a@b.example`` as a link and no number in ``+44 = 7700 = 900123``,
so a laundered phone number was not found (seven tests failed there, none on 3.11.7). No ``re``
pattern of the library uses either construct; patterns matched with the ``regex`` package
(``tether.core._pattern``: a schema's own patterns) are not ``re``'s and are left out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

import pytest

import tether

# A quantifier (``*``, ``+``, ``?`` or ``{m,n}``) followed by ``+``, not escaped; or ``(?>``.
_POSSESSIVE = re.compile(r"(?<!\\)(?:\\\\)*(?:[*+?]|\{\d*,?\d*\})\+|\(\?>")


def _patterns() -> Iterator[tuple[str, str]]:
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if info.name.endswith(".__main__"):
            continue  # runs the CLI when imported
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an extra that is not installed here
            continue
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                yield f"{info.name}.{name}", value.pattern


def _uses_possessive(pattern: str) -> bool:
    # Inside a character class ``[*+]`` is two characters, no quantifier: each class stands as one
    # character first.
    without_classes = re.sub(r"\[\^?\]?(?:\\.|[^\]\\])*\]", "c", pattern)
    return _POSSESSIVE.search(without_classes) is not None


def test_the_check_finds_what_it_looks_for() -> None:
    assert _uses_possessive(r"\d++x") and _uses_possessive(r"(?:ab)*+c") and _uses_possessive(r"(?>a|b)")
    assert _uses_possessive(r"a{2,}+") and _uses_possessive(r"[a-z]?+")
    # Not possessive: an escaped plus repeated, a plus inside a class, a plain quantifier.
    assert not _uses_possessive(r"\++") and not _uses_possessive(r"[*+]+") and not _uses_possessive(r"a+b*")
    assert not _uses_possessive(r"(?:[\w.]+/)*[\w.]+") and not _uses_possessive(r"[^\]+]+")


def test_no_pattern_of_the_library_is_possessive_or_atomic() -> None:
    found = dict(_patterns())
    assert len(found) > 50  # the provenance finders among them
    offending = sorted(name for name, pattern in found.items() if _uses_possessive(pattern))
    assert offending == []


@pytest.mark.parametrize(
    ("text", "links"),
    [("write to a@b.example, pay 98.70", []), ("see secure-login.xyz/a now", ["secure-login.xyz/a"])],
)
def test_an_address_is_no_link_on_this_python(text: str, links: list[str]) -> None:
    from tether.policy._provenance_values import find_links

    assert [link.key for link in find_links(text)] == links
