"""The one look-alike check (tether.core._confusables): mixed scripts and TR39 skeletons, punycode
decoded and both forms given; legitimate international names pass."""

from __future__ import annotations

import pytest

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
