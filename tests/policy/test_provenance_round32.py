"""Round thirty-two of attacks (helper ``redteam-mime``): a message a server decodes is itself
encoded, as a mail client reads it.

Round 30 judged Gmail's ``raw`` argument (base64url of an RFC 822 message) as the server
decodes it: the message's text. But that text is MIME, and the mail client shows it decoded
once more: a body part of ``Content-Transfer-Encoding: base64`` or ``quoted-printable`` (a
soft line break ``=\\r\\n`` splitting the link, ``=3D`` hiding ``href=``), a message attached
inside the message, and encoded words (RFC 2047: ``=?utf-8?B?...?=``) in ``To``/``Cc``/
``Reply-To``/``Subject``, or inside an address where RFC 2047 allows none (a reader that
decodes it anyway: "splitting the email atom"). Each sent the attacker's link or recipient
unreviewed. (An HTML part's character references were already read: ``find_links`` decodes
them.) A string that is a MIME message is now judged as its client shows it
too (headers decoded, each address on its own, each text part decoded by its transfer encoding
and charset), beside the text as written; bounded in size, parts, nesting, headers and decoded text.

Each test checks the attack is judged AND the legitimate version (the user's own recipient and
the listing's link in a message the model built) still sends unreviewed.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable

import pytest
from _travel import ATTACKER_URL, FRIEND_MAIL, HOTEL_URL
from test_provenance_round30 import RemoteMail, send_raw_through

from tether.policy._provenance_mime import mime_read
from tether.policy._provenance_schema import declared_received
from tether.policy._provenance_values import find_handles, find_links, find_numbers

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2")]

ATTACKER_MAIL = "billing@secure-systems.example"
RAW = {"type": "string", "format": "base64url"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def qp(text: str) -> str:
    """Quoted-printable with the link's punctuation escaped and a soft line break every few
    characters: the link is in no line as written."""
    escaped = [f"={ord(c):02X}" if c in ".:/@=" else c for c in text]
    return "=\r\n".join("".join(escaped[i : i + 5]) for i in range(0, len(escaped), 5))


def word(text: str) -> str:
    return f"=?utf-8?B?{b64(text)}?="


def head(to: str = FRIEND_MAIL, extra: str = "") -> str:
    return f"Subject: Hotel\r\nMIME-Version: 1.0\r\n{extra}To: {to}\r\n"


def _part(kind: str, cte: str, body: str) -> str:
    return f'Content-Type: {kind}; charset="utf-8"\r\nContent-Transfer-Encoding: {cte}\r\n\r\n{body}\r\n'


def _text(link: str, k: int) -> str:
    return f"Hello{'!' * k} Book at {link}."


def _base64_body(link: str, mail: str, k: int) -> str:
    return head(mail) + _part("text/plain", "base64", b64(_text(link, k)))


def _qp_body(link: str, mail: str, k: int) -> str:
    return head(mail) + _part("text/plain", "quoted-printable", qp(_text(link, k)))


def _qp_html(link: str, mail: str, k: int) -> str:
    html = qp(f'<p>Hello{"!" * k} <a href="https://{link}">Book here</a>.</p>')
    return (
        head(mail, 'Content-Type: multipart/alternative; boundary="b"\r\n')
        + "\r\n--b\r\n"
        + _part("text/plain", "7bit", "Book at the hotel.")
        + "--b\r\n"
        + _part("text/html", "quoted-printable", html)
        + "--b--\r\n"
    )


def _attached(link: str, mail: str, k: int) -> str:
    inner = head(mail) + _part("text/plain", "base64", b64(_text(link, k)))
    return (
        head(mail, 'Content-Type: multipart/mixed; boundary="o"\r\n')
        + "\r\n--o\r\n"
        + _part("text/plain", "7bit", "See the attached note.")
        + "--o\r\nContent-Type: message/rfc822\r\n\r\n"
        + inner
        + "--o--\r\n"
    )


# A recipient: the encoded header last, a plain body (the listing's link) after it.


def _encoded_to(link: str, mail: str, k: int) -> str:
    return head(f"Bob {word(f'<{mail}>')}") + f"\r\n{_text(HOTEL_URL, k)}\r\n"


def _encoded_reply_to(link: str, mail: str, k: int) -> str:
    return f"To: {FRIEND_MAIL}\r\nSubject: Hotel\r\nReply-To: {word(mail)}\r\n\r\n{_text(HOTEL_URL, k)}\r\n"


def _encoded_cc(link: str, mail: str, k: int) -> str:
    q = "=?utf-8?Q?" + "".join(f"={c:02X}" for c in mail.encode()) + "?="
    return f"To: {FRIEND_MAIL}\r\nSubject: Hotel\r\nCc: {q}\r\n\r\n{_text(HOTEL_URL, k)}\r\n"


def _encoded_local_part(link: str, mail: str, k: int) -> str:
    # An encoded word where RFC 2047 allows none, in the address itself: a reader that decodes
    # it anyway sends to the address it spells ("splitting the email atom").
    # The user's own: an encoded word where it belongs, in the name.
    local, _, domain = mail.partition("@")
    q = f"=?utf-8?q?{local}=40{domain.replace('.', '=2E')}=3E=00?=@partner.example"
    to = f"Bob <{q}>" if mail != FRIEND_MAIL else f"{word('Bob Müller')} <{mail}>"
    return head(to) + f"\r\n{_text(HOTEL_URL, k)}\r\n"


def _encoded_subject(link: str, mail: str, k: int) -> str:
    return f"To: {mail}\r\nSubject: {word(_text(link, k))}\r\n\r\nSee the subject.\r\n"


Build = Callable[[str, str, int], str]
ATTACKS: dict[str, Build] = {
    "base64 body": _base64_body,
    "quoted-printable body": _qp_body,
    "QP HTML alternative, escaped href": _qp_html,
    "attached message": _attached,
    "encoded word in Subject": _encoded_subject,
}
RECIPIENTS: dict[str, Build] = {
    "encoded word in To": _encoded_to,
    "encoded word in Reply-To": _encoded_reply_to,
    "Q encoding in Cc": _encoded_cc,
    "encoded word in an address": _encoded_local_part,
}


def _raw(build: Build, link: str, mail: str) -> tuple[str, str]:
    """The message and its base64url, its greeting's length chosen so that neither the message
    as written nor its encoding holds an address, account, number or link but the ones it is
    meant to (each is judged too, and base64 prints such runs by chance: a legitimate message
    that happens to is reviewed, as before this round)."""
    expected = {mail.lower(), FRIEND_MAIL, FRIEND_MAIL.partition("@")[2], link.lower(), HOTEL_URL}
    for k, pad in itertools.product(range(8), range(8)):
        message = f"X-Mailer: tether{'.' * pad}\r\n{build(link, mail, k)}"
        raw = base64.urlsafe_b64encode(message.encode()).decode().rstrip("=")
        found = [*find_handles(message), *(x.raw.lower() for x in find_links(message))]
        plain = not (find_handles(raw) or find_links(raw) or find_numbers(raw) or find_numbers(message))
        if plain and set(found) <= expected:
            return message, raw
    raise AssertionError("no greeting leaves the message plain")


async def _send(raw: str) -> tuple[RemoteMail, list[str]]:
    return await send_raw_through(RAW, raw)


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("link", [ATTACKER_URL, HOTEL_URL], ids=["attackers", "listings"])
async def test_a_link_a_message_encodes_again_is_judged_as_the_client_shows_it(
    attack: str, link: str
) -> None:
    message, raw = _raw(ATTACKS[attack], link, FRIEND_MAIL)
    assert link not in message  # encoded twice: not in what round 30 judged
    server, found = await _send(raw)
    if link == ATTACKER_URL:
        assert server.sent == [] and "untrusted_link" in found
    else:
        assert found == [] and server.sent == [raw]


@pytest.mark.parametrize("attack", list(RECIPIENTS))
@pytest.mark.parametrize("mail", [ATTACKER_MAIL, FRIEND_MAIL], ids=["attackers", "users"])
async def test_a_recipient_in_an_encoded_header_is_judged(attack: str, mail: str) -> None:
    message, raw = _raw(RECIPIENTS[attack], HOTEL_URL, mail)
    assert ATTACKER_MAIL not in message and (mail == ATTACKER_MAIL or "=?utf-8?" in message)
    server, found = await _send(raw)
    if mail == ATTACKER_MAIL:
        assert server.sent == [] and "untrusted_handle" in found
    else:
        assert found == [] and server.sent == [raw]


def test_the_recipient_is_read_as_an_address() -> None:
    # Alone, as a recipient argument holds one: judged as one where the raw message is.
    for header in (
        word(ATTACKER_MAIL),
        f"Bob {word(f'<{ATTACKER_MAIL}>')}",
        f"{word('Bob')} <{ATTACKER_MAIL}>",
    ):
        shown = mime_read(f"To: {header}\r\nSubject: Hotel\r\n\r\nHello.\r\n")
        assert shown is not None and ATTACKER_MAIL in shown


def test_a_plain_message_is_judged_as_before() -> None:
    # Nothing encoded inside: what is judged is the text as round 30 read it.
    parameters = {"type": "object", "properties": {"raw": RAW}}
    for text in (
        f"Book at {HOTEL_URL}.",
        f"Dear Bob:\r\n\r\nBook at {HOTEL_URL}.",
        "Subject: x\r\nno blank line",
    ):
        raw = base64.urlsafe_b64encode(text.encode()).decode()
        assert declared_received(parameters, {"raw": raw}) == {"raw": text}


def test_a_hostile_message_costs_what_the_bounds_allow() -> None:
    # Parts past the bound, nesting past it, decoded text past it, headers past it: read up to
    # the bounds (what the gate spends on one value is bounded), a link within them still found.
    link = _part("text/plain", "base64", b64(f"Book at {ATTACKER_URL}."))
    top = head(FRIEND_MAIL, 'Content-Type: multipart/mixed; boundary="m"\r\n') + "\r\n"
    first = mime_read(top + "--m\r\n" + link + "--m--\r\n")
    assert first is not None and f"Book at {ATTACKER_URL}." in first
    many = top + "--m\r\n" + link + "".join("--m\r\n\r\nx\r\n" for _ in range(100_000)) + "--m--\r\n"
    shown = mime_read(many)
    assert shown is not None and f"Book at {ATTACKER_URL}." in shown and len(shown) < 600
    deep = "".join(
        f'--n{i - 1}\r\nContent-Type: multipart/mixed; boundary="n{i}"\r\n\r\n' for i in range(5000)
    )
    shown = mime_read(head(FRIEND_MAIL, 'Content-Type: multipart/mixed; boundary="n-1"\r\n') + "\r\n" + deep)
    assert shown is None or len(shown) < 600
    large = top + "".join("--m\r\n" + _part("text/plain", "base64", b64("x" * 30_000)) for _ in range(60))
    shown = mime_read(large + "--m--\r\n")
    assert shown is not None and sum(map(len, shown)) <= 1 << 20
    folded = (
        f"To: {FRIEND_MAIL}\r\nX-Long: y\r\n"
        + " z\r\n" * 200_000
        + f"Cc: {word(ATTACKER_MAIL)}\r\n\r\nHi.\r\n"
    )
    shown = mime_read(folded)
    assert shown is not None and ATTACKER_MAIL in shown
