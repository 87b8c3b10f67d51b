"""The one look-alike check (tether.core._confusables): mixed scripts and TR39 skeletons, punycode
decoded and both forms given; legitimate international names pass."""

from __future__ import annotations

import pytest

from tether.core import _confusables
from tether.core._confusables import check_name, find_names, skeleton


@pytest.mark.parametrize(
    ("name", "imitates"),
    [
        ("billing@p\u0430ypal.com", "billing@paypal.com"),  # Cyrillic а inside a Latin label
        ("https://g\u03bf\u03bfgle.com/login", "google.com"),  # Greek omicrons
        ("xn--pypal-4ve.com", "paypal.com"),  # the same look-alike, written in punycode
        ("\u0430\u0440\u0440\u04cf\u0435.com", "appie.com"),  # wholly Cyrillic, no mixing in the label
    ],
)
def test_look_alikes_are_caught_with_both_forms(name: str, imitates: str) -> None:
    check = check_name(name)
    assert check.suspicious and check.looks_like == imitates
    assert check.ascii.startswith("xn--") or ".xn--" in check.ascii or "@" in name
    assert not check.unicode.isascii()  # the decoded form is given next to the registered one


@pytest.mark.parametrize(
    "name",
    [
        "paypal.com",
        "https://example.org/a?b=1",
        "m\u00fcnchen.de",
        "\u4f8b\u3048.jp",
        "\u03c0\u03b1\u03c1\u03ac\u03b4\u03b5\u03b9\u03b3\u03bc\u03b1.gr",
        "ops@xn--mnchen-3ya.de",
    ],
)
def test_legitimate_names_in_one_script_pass(name: str) -> None:
    check = check_name(name)
    assert not check.suspicious, check.problems
    if name.endswith("xn--mnchen-3ya.de"):
        assert check.unicode == "m\u00fcnchen.de" and check.internationalised


def test_hidden_characters_in_a_name_are_a_problem_and_skeletons_match_look_alikes() -> None:
    assert check_name("pay\u200bpal.com").suspicious
    assert skeleton("p\u0430ypal") == skeleton("paypal") == "paypal"


def test_names_are_found_in_running_text() -> None:
    text = "Send it to billing@p\u0430ypal.com, see https://xn--80ak6aa92e.com/a and example.org. v1.2"
    assert find_names(text) == ["billing@p\u0430ypal.com", "https://xn--80ak6aa92e.com/a", "example.org"]
    assert find_names("(or https://example.org/a_(b))") == ["https://example.org/a_(b)"]


def test_a_punycode_top_level_domain_is_read_whole() -> None:
    assert find_names("shop at example.xn--p1ai today") == ["example.xn--p1ai"]
    assert check_name("example.xn--p1ai").unicode == "example.\u0440\u0444"


def _steps(text: str) -> tuple[list[str], int]:
    _confusables._Work.steps = 0
    found = find_names(text)
    return found, _confusables._Work.steps


@pytest.mark.parametrize(
    "unit",
    [
        "p\u0430y\u200bpal\u200d.\u200bc\u043em\u2060a",  # mixed scripts, hidden characters, dots
        "\u200b",  # a flood of zero-width spaces
        "a.1.",  # labels that never reach a top-level domain
        "x@y",  # e-mail shapes with no host
        "ab://",  # URL shapes
        ")",
    ],
)
def test_a_long_hostile_run_without_spaces_takes_work_linear_in_its_length(unit: str) -> None:
    blob = (unit * (200_000 // len(unit) + 1))[:200_000]
    legit = " Send it to billing@p\u0430ypal.com, see https://g\u03bf\u03bfgle.com/login (or example.org)."
    found, steps = _steps(blob + legit)
    # Each character of the input is stepped over a bounded number of times (the regular expression
    # this replaced re-read the rest of the run from every position: quadratic).
    assert steps <= 6 * len(blob + legit), steps
    assert found[-3:] == ["billing@p\u0430ypal.com", "https://g\u03bf\u03bfgle.com/login", "example.org"]
    assert all(check_name(n).suspicious for n in found[-3:-1]) and not check_name(found[-1]).suspicious


def test_names_inside_a_long_run_are_still_found() -> None:
    run = "\u200b".join(["x"] * 5_000) + "\u200bevil.p\u0430ypal.com\u200b" + "y" * 50_000
    assert find_names(run) == ["evil.p\u0430ypal.com"]
    assert find_names("go to https://example.org/a))))).") == ["https://example.org/a"]
