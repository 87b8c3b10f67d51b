"""Round thirty-three of attacks (helper ``prov33``): a server's argument of a declared text
media type, read as its readers read it.

Round 30 judged a string whose schema declares ``contentMediaType`` JSON as parsed, and round
32 one that is a MIME message as its client shows it. A reader of the rules wrote the
attacker's link where only a reader of that media type sees it:

1. **YAML** (``application/yaml``, ``application/x-yaml``, ``text/yaml``) was not parsed at all,
   and a double-quoted YAML scalar decodes escapes (``\\xHH``, ``\\uHHHH``): the link was in
   no text the policy judged.
2. **a repeated key** in a JSON text: the policy parsed it keeping the key's last value (as
   Python and JavaScript do) while a reader that keeps the first (several Go and Java readers)
   received the first: the attacker's copy first, the listing's after it, sent the attacker's.
   Under a ``contentSchema`` that decodes the value (base64), or with the link in ``\\u``
   escapes, the first copy was judged in no form at all. Each reading is judged now.
3. **a lenient JSON (JSON5) text**: ``{body: '...\\x68...'}`` fails a strict parse and was
   judged as written, its ``\\x`` escapes hiding the link; it is judged with its escapes
   decoded too.
4. **JSON lines**: a line with a repeated key, likewise.
5. **an encoding the policy did not decode**: ``contentEncoding`` ``base85`` or ``x-uuencode``,
   and ``format: hex`` (a format the policy read only for base64), were judged as the encoded
   text, which holds no link. They are decoded now (with ``ascii85`` and ``base32hex``).

Each test checks the attack is judged AND the legitimate version (the listing's link) still
sends unreviewed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable

import pytest
from _travel import ATTACKER_URL, HOTEL_URL
from test_provenance_round30 import send_raw_through

from tether.policy._provenance_schema import declared_received

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2")]

ATTACK = f"https://{ATTACKER_URL}"
LEGIT = f"https://{HOTEL_URL}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def x_escaped(link: str) -> str:
    return "".join(f"\\x{ord(c):02x}" for c in link)


def u_escaped(link: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in link)


def book(link: str) -> bytes:
    return f"Book at {link}.".encode()


def uuencoded(data: bytes) -> str:
    return "".join(binascii.b2a_uu(data[i : i + 45]).decode() for i in range(0, len(data), 45))


def media(kind: str, inner: dict[str, object] | None = None) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string", "contentMediaType": kind}
    if inner is not None:
        schema["contentSchema"] = inner
    return schema


BASE64_BODY: dict[str, object] = {
    "type": "object",
    "properties": {"body": {"type": "string", "contentEncoding": "base64"}},
}

# name: (the raw argument's schema, the message with ``link`` as the schema's reader receives it)
CASES: dict[str, tuple[dict[str, object], Callable[[str], str]]] = {
    "yaml_x_escapes": (media("application/yaml"), lambda link: f'body: "Book at {x_escaped(link)}."\n'),
    "yaml_u_escapes": (media("text/x-yaml"), lambda link: f'body: "Book at {u_escaped(link)}."\n'),
    "json_first_key_base64": (
        media("application/json", BASE64_BODY),
        lambda link: f'{{"body": "{b64("Book at " + link)}", "body": "{b64("Book at " + LEGIT)}"}}',
    ),
    "json_first_key_escaped": (
        media("application/json"),
        lambda link: f'{{"body": "Book at {u_escaped(link)}", "body": "Book at {LEGIT}"}}',
    ),
    "json5_x_escapes": (media("application/json"), lambda link: f"{{body: 'Book at {x_escaped(link)}'}}"),
    "base85": (
        {"type": "string", "contentEncoding": "base85"},
        lambda link: base64.b85encode(book(link)).decode(),
    ),
    "uuencode": ({"type": "string", "contentEncoding": "x-uuencode"}, lambda link: uuencoded(book(link))),
    "format_hex": ({"type": "string", "format": "hex"}, lambda link: book(link).hex()),
    "jsonl_first_key": (
        media("application/x-ndjson"),
        lambda link: f'{{"to": "bob"}}\n{{"body": "Book at {u_escaped(link)}", "body": "Book at {LEGIT}"}}\n',
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_media_types_reading_is_judged(case: str) -> None:
    schema, message = CASES[case]
    server, attack = await send_raw_through(schema, message(ATTACK))
    assert "untrusted_link" in attack
    assert not server.sent
    server, legit = await send_raw_through(schema, message(LEGIT))
    assert legit == []
    assert server.sent


def _received(kind: str, raw: str) -> object:
    out = declared_received({"type": "object", "properties": {"raw": media(kind)}}, {"raw": raw})
    return raw if out is None else out["raw"]  # None: received as written


def test_a_yaml_text_is_read_as_yaml_reads_it() -> None:
    folded = 'body: "Book at https://www.grand-\\\n  hotel.example/rooms."\n'
    assert _received("application/yaml", folded) == {"body": f"Book at {LEGIT}."}
    assert _received("application/yaml", "body: !!binary " + b64("hi") + "\n") == {"body": "hi"}


def test_a_yaml_alias_is_not_expanded() -> None:
    """A "billion laughs" document (each level aliases the one before ten times) is read as the
    text it is, not as the tree it would print as."""
    levels = ['a0: &a0 "lol"'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    bomb = "\n".join(levels) + "\n"
    assert _received("application/yaml", bomb) == bomb


def test_a_json_text_with_one_value_a_key_is_read_once() -> None:
    assert _received("application/json", json.dumps({"body": "hi"})) == {"body": "hi"}
    assert _received("application/json", '{"body": "a", "body": "b"}') == [{"body": "b"}, {"body": "a"}]
