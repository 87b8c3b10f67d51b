"""Round thirty-one of attacks by a reader of round 30's code (helper ``redteam-variants``):
variants of what a tool receives that round 30's readers missed.

1. **a server's encoding by another name**: ``declared_received`` decoded base64 only where the
   schema spelt it ``base64`` in lower case, on the string's own schema, and strictly. An
   optional ``Base64Str`` (an ``anyOf`` beside ``null``: no branch was taken for a string),
   ``contentEncoding: BASE64``, the other encodings JSON Schema names (``base16``,
   ``quoted-printable``; ``base32`` too, read below), base64 with characters a lenient decoder
   skips (a ``*``, an ``=`` between groups: Python's ``b64decode`` and Node's ``Buffer`` read
   on) and JSON by another media type (``text/json``, ``application/x-json``, JSON lines) each
   sent the attacker's link unjudged.
2. **a schema's shape**: an ``allOf`` (a ``$ref`` with the keywords beside it, or an object
   built of two) and a discriminated ``oneOf`` (two object branches: none was taken) hid the
   string's encoding, and so did a recursive model (a reference inside its own expansion was
   left unread: a reply in a thread) and a tuple's items (``prefixItems``). ``allOf`` branches
   are now merged, a union's member is told by its ``const``/``enum`` properties, a string's
   branch by its type, a recursive model unrolled as deep as a value nests, a tuple read by
   position, a percent-encoded pointer (``#/%24defs/X``) decoded.
3. **a schema that references one definition from many places** (a hostile server's): round
   30's ``inline_refs`` expanded every reference in place, a tree as large as the fan-out to the
   power of the depth: the gate hung and filled memory. Each target is now expanded once.
4. **what a local tool receives in a form ``as_data`` did not read**: a dataclass field's
   pydantic alias (keyed by its attribute name, not as the schema names it), an
   ``extra="allow"`` model's extra values (left out), ``Iterable[...]`` (pydantic's lazy
   iterator, read by its ``repr``). Each is read now as the function gets it.

Each test checks the attack is judged (or denied) AND the legitimate version still runs
unreviewed.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterable
from typing import Annotated, Any

import pytest
from _travel import ATTACKER_IBAN, ATTACKER_URL, CTX, FRIEND_MAIL, HOTEL_URL
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass
from test_provenance_round3 import FRIEND_IBAN
from test_provenance_round30 import NoEvil, _escaped, send_raw_through

from tether import Effect, Policy, tool
from tether.core.types import ToolSpec
from tether.errors import PolicyError
from tether.policy import propose
from tether.policy._provenance_schema import declared_received, inline_refs

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _starred(text: str) -> str:
    encoded = b64(text)
    return "*".join(encoded[i : i + 12] for i in range(0, len(encoded), 12))


def _json(media: str) -> dict[str, Any]:
    return {
        "type": "string",
        "contentMediaType": media,
        "contentSchema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {}}},
    }


def _json_text(message: str) -> str:
    return f'{{"to": "{FRIEND_MAIL}", "body": "{_escaped(message)}"}}'


# -- 1. a server's encoding by another name --------------------------------------------------------

ENCODINGS: dict[str, tuple[dict[str, Any], Any]] = {
    "optional Base64Str": ({"anyOf": [{"type": "string", "format": "base64"}, {"type": "null"}]}, b64),
    "BASE64": ({"type": "string", "contentEncoding": "BASE64"}, b64),
    "base64 with stray characters": ({"type": "string", "contentEncoding": "base64"}, _starred),
    "padding between groups": ({"type": "string", "format": "byte"}, lambda m: "QUJD=" + b64(m)),
    "base16": ({"type": "string", "contentEncoding": "base16"}, lambda m: m.encode().hex()),
    "quoted-printable": (
        {"type": "string", "contentEncoding": "quoted-printable"},
        lambda m: "".join(f"={c:02X}" for c in m.encode()),
    ),
    "text/json": (_json("text/json"), _json_text),
    "application/x-json": (_json("application/x-json"), _json_text),
    "JSON with a charset": (_json("application/json; charset=utf-8"), _json_text),
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("link", [ATTACKER_URL, HOTEL_URL], ids=["attackers", "listings"])
async def test_a_message_a_server_decodes_by_any_name_is_judged_as_it_receives_it(
    encoding: str, link: str
) -> None:
    schema, encode = ENCODINGS[encoding]
    message = f"To: {FRIEND_MAIL}\r\nSubject: Hotel\r\n\r\nBook at {link}."
    server, found = await send_raw_through(schema, encode(message))
    if link == ATTACKER_URL:
        assert server.sent == [] and found == ["untrusted_link"]
    else:
        assert found == [] and server.sent == [encode(message)]


def test_base32_is_read_as_the_server_decodes_it() -> None:
    # Its text alone already asks for review (a long capitalised token reads as a handle), so
    # it is read here: what the gate judges is the message it decodes.
    parameters = {"type": "object", "properties": {"raw": {"type": "string", "contentEncoding": "Base32"}}}
    for link in (ATTACKER_URL, HOTEL_URL):
        encoded = base64.b32encode(f"Book at {link}.".encode()).decode().rstrip("=").lower()
        assert declared_received(parameters, {"raw": encoded}) == {"raw": f"Book at {link}."}


@pytest.mark.parametrize("media", ["application/x-ndjson", "application/jsonl", "application/json-seq"])
def test_json_lines_are_read_as_the_server_parses_them(media: str) -> None:
    # A value a line, its characters escaped: the link is only in what each line parses to.
    parameters = {"type": "object", "properties": {"raw": {"type": "string", "contentMediaType": media}}}
    for link in (ATTACKER_URL, HOTEL_URL):
        lines = f'\x1e{{"to": "{FRIEND_MAIL}"}}\n{{"body": "{_escaped(link)}"}}\n'
        received = declared_received(parameters, {"raw": lines})
        assert received == {"raw": [{"to": FRIEND_MAIL}, {"body": link}]}


# -- 2. a schema's shape -----------------------------------------------------------------------------

ENCODED = {"type": "string", "contentEncoding": "base64"}
SHAPES: dict[str, tuple[dict[str, Any], Any]] = {
    # A reference with keywords beside it, as some generators write one (no anyOf).
    "allOf of a $ref": (
        {"raw": {"allOf": [{"$ref": "#/$defs/Raw"}], "description": "The message."}},
        lambda m: {"raw": b64(m)},
    ),
    # An object made of two: its envelope's fields, and what the second says of its body.
    "allOf of two objects": (
        {
            "mail": {
                "allOf": [
                    {"$ref": "#/$defs/Envelope"},
                    {
                        "type": "object",
                        "properties": {"to": {"type": "string"}, "raw": {"$ref": "#/$defs/Raw"}},
                    },
                ]
            }
        },
        lambda m: {"mail": {"to": FRIEND_MAIL, "raw": b64(m)}},
    ),
    # pydantic's discriminated union: two objects, told apart by their ``kind``.
    "discriminated oneOf": (
        {
            "mail": {
                "oneOf": [{"$ref": "#/$defs/Plain"}, {"$ref": "#/$defs/Encoded"}],
                "discriminator": {
                    "propertyName": "kind",
                    "mapping": {"plain": "#/$defs/Plain", "base64": "#/$defs/Encoded"},
                },
            }
        },
        lambda m: {"mail": {"kind": "base64", "body": b64(m)}},
    ),
    "a $ref into nested $defs": (
        {"raw": {"$ref": "#/$defs/Envelope/$defs/Inner"}},
        lambda m: {"raw": b64(m)},
    ),
}
DEFS = {
    "Raw": ENCODED,
    "Envelope": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "raw": {"type": "string"}},
        "$defs": {"Inner": ENCODED},
    },
    "Plain": {
        "type": "object",
        "properties": {"kind": {"const": "plain", "type": "string"}, "body": {"type": "string"}},
    },
    "Encoded": {
        "type": "object",
        "properties": {"kind": {"const": "base64", "type": "string"}, "body": ENCODED},
    },
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_encoding_behind_a_schemas_shape_is_judged_as_decoded(shape: str) -> None:
    properties, arguments = SHAPES[shape]
    parameters = {"type": "object", "properties": properties, "$defs": DEFS}
    spec = ToolSpec("draft", "Draft a message.", parameters, Effect.WRITE, source="mail")
    policy = Policy(automatic_effects=[Effect.READ, Effect.WRITE], rules=[NoEvil()])

    def envelope(message: str) -> str:
        return json.dumps({"tool": "draft", "arguments": arguments(message)})

    with pytest.raises(PolicyError) as refused:
        propose(CTX, envelope("Book at https://evil.example/deal."), tools=[spec], policy=policy)
    assert refused.value.reason == "evil_named"
    assert not propose(CTX, envelope(f"Book at {HOTEL_URL}."), tools=[spec], policy=policy).needs_approval


THREAD = {
    "type": "object",
    "properties": {"raw": ENCODED, "replies": {"type": "array", "items": {"$ref": "#/%24defs/Thread"}}},
}
SHAPES_READ: dict[str, tuple[dict[str, Any], Any]] = {
    # A recursive model (a thread of replies): its own reference was left unread inside itself.
    "a reply deep in a thread": (
        {"thread": {"$ref": "#/$defs/Thread"}},
        lambda m: {"thread": _nested({"raw": b64(m)}, 6)},
    ),
    # An object composed of composed parts.
    "an allOf inside an allOf": (
        {"mail": {"allOf": [{"allOf": [{"$ref": "#/$defs/Envelope"}, {"properties": {"raw": ENCODED}}]}]}},
        lambda m: {"mail": {"to": FRIEND_MAIL, "raw": b64(m)}},
    ),
    # A tuple's items (``tuple[str, Base64Str]``): ``prefixItems``, read as none.
    "a tuple's item": (
        {"pair": {"type": "array", "prefixItems": [{"type": "string"}, ENCODED], "items": False}},
        lambda m: {"pair": ["note", b64(m)]},
    ),
}


def _nested(reply: dict[str, Any], levels: int) -> dict[str, Any]:
    for _ in range(levels):
        reply = {"raw": b64("hello"), "replies": [reply]}
    return reply


@pytest.mark.parametrize("shape", list(SHAPES_READ))
@pytest.mark.parametrize("link", [ATTACKER_URL, HOTEL_URL], ids=["attackers", "listings"])
def test_an_encoding_a_recursive_or_tuple_schema_declares_is_read(shape: str, link: str) -> None:
    properties, arguments = SHAPES_READ[shape]
    parameters = {"type": "object", "properties": properties, "$defs": {**DEFS, "Thread": THREAD}}
    given = arguments(f"Book at {link}.")
    received = declared_received(parameters, given)
    assert received is not None and f"Book at {link}." in json.dumps(received)
    assert b64(f"Book at {link}.") not in json.dumps(received)


def test_a_union_member_another_kind_names_is_not_decoded() -> None:
    parameters = {"type": "object", "properties": SHAPES["discriminated oneOf"][0], "$defs": DEFS}
    plain = {"mail": {"kind": "plain", "body": b64("hello")}}
    assert declared_received(parameters, plain) is None  # the plain member's body is text


# -- 3. a schema that references one definition from many places ----------------------------------


def _fanned(fan: int, depth: int) -> dict[str, Any]:
    """Definitions ``depth`` deep, each referencing the next ``fan`` times; the last encoded."""
    defs: dict[str, Any] = {
        f"D{i}": {
            "type": "object",
            "properties": {f"p{j}": {"$ref": f"#/$defs/D{i + 1}"} for j in range(fan)},
        }
        for i in range(depth)
    }
    defs[f"D{depth}"] = {**ENCODED, "x-back": {"$ref": "#/$defs/D0"}}  # and a cycle back
    return {"type": "object", "properties": {"root": {"$ref": "#/$defs/D0"}}, "$defs": defs}


def _distinct(node: Any, seen: set[int]) -> int:
    if id(node) in seen or not isinstance(node, dict | list):
        return 0
    seen.add(id(node))
    return 1 + sum(_distinct(v, seen) for v in (node.values() if isinstance(node, dict) else node))


@pytest.mark.parametrize("fan,depth", [(6, 6), (40, 8)], ids=["small", "hostile"])
def test_a_schema_that_fans_out_costs_what_it_holds(fan: int, depth: int) -> None:
    parameters = _fanned(fan, depth)
    inlined = inline_refs(parameters)
    # Each definition expanded once a depth: nodes of the order of what the schema holds, not
    # the fan-out to the power of the depth (46,656 leaves for the small one; 40**8 for the hostile one).
    assert _distinct(inlined, set()) <= 40 * (fan + 3) * (depth + 1)
    # Read along the value as before: the leaf's encoding is still found.
    value: Any = b64(ATTACKER_URL)
    for _ in range(depth):
        value = {"p1": value}
    received = declared_received(parameters, {"root": value})
    assert received is not None and ATTACKER_URL in json.dumps(received)


# -- 4. what a local tool receives in a form as_data did not read ---------------------------------


def _decoded(value: Any) -> Any:
    return base64.b64decode(value).decode() if isinstance(value, str) else value


Account = Annotated[str, BeforeValidator(_decoded)]


@pydantic_dataclass
class AliasedPayee:
    account: Annotated[Account, Field(alias="acct")]
    note: str = "rent"


@dataclasses.dataclass
class PlainPayee:
    account: Annotated[Account, Field(alias="acct")]
    note: str = "rent"


class Tagged(BaseModel):
    """A payee whose extra fields are kept, each decoded before it is."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _decode(cls, data: Any) -> Any:
        return {k: _decoded(v) for k, v in data.items()} if isinstance(data, dict) else data


READERS: dict[str, tuple[Any, Any, Any]] = {
    # (annotation, what the model writes, what the function gets)
    "pydantic dataclass alias": (AliasedPayee, {"acct": b64(ATTACKER_IBAN)}, {"acct": ATTACKER_IBAN}),
    "dataclass alias": (PlainPayee, {"acct": b64(ATTACKER_IBAN)}, {"acct": ATTACKER_IBAN}),
    "extra fields": (Tagged, {"iban": b64(ATTACKER_IBAN)}, {"iban": ATTACKER_IBAN}),
    "Iterable": (Iterable[Account], [b64(ATTACKER_IBAN)], [ATTACKER_IBAN]),
}


@pytest.mark.parametrize("kind", list(READERS))
def test_what_the_function_gets_is_read_in_the_form_the_schema_names(kind: str) -> None:
    annotation, given, gets = READERS[kind]

    def pay(recipient: Any) -> str:
        """Pay."""
        return "paid"

    pay.__annotations__ = {"recipient": Annotated[annotation, Field(description="Account.")], "return": str}
    paying = tool(effect=Effect.PURCHASE)(pay)
    assert paying.received({"recipient": given}) == {"recipient": gets}
    # Keyed as the schema names it (``acct``, not the attribute); the user's account reads as
    # the user's.
    plain = json.loads(json.dumps(given).replace(b64(ATTACKER_IBAN), b64(FRIEND_IBAN)))
    assert paying.received({"recipient": plain}) == {
        "recipient": json.loads(json.dumps(gets).replace(ATTACKER_IBAN, FRIEND_IBAN))
    }


def test_a_dataclass_left_to_its_authors_default_stays_left_out() -> None:
    def pay(recipient: Annotated[PlainPayee, Field(description="Account.")]) -> str:
        """Pay."""
        return "paid"

    paying = tool(effect=Effect.PURCHASE)(pay)
    assert paying.received({"recipient": {"acct": b64(FRIEND_IBAN)}}) == {"recipient": {"acct": FRIEND_IBAN}}
