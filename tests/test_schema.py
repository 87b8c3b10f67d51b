"""The one schema engine (tether.core._schema): exact types, formats, no remote references, a cache,
errors that name the argument, and tool contracts validated the way pydantic declares them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Literal

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from tether.core import _schema as engine
from tether.core._schema import (
    FORMATS,
    SchemaViolation,
    UnusableSchema,
    check_arguments,
    compile_schema,
    validate,
)
from tether.errors import PolicyError, ToolInputError
from tether.tools import Effect, tool

# -- the type checker --------------------------------------------------------------------------

JSON_TYPES = ["integer", "number", "string", "boolean", "null", "array", "object"]


def reference_type(value: Any, kind: str) -> bool:
    """What each JSON type admits, written independently of the engine."""
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) is int or (type(value) is float and math.isfinite(value))
    if kind == "string":
        return type(value) is str
    if kind == "boolean":
        return type(value) is bool
    if kind == "null":
        return value is None
    if kind == "array":
        return type(value) is list
    return type(value) is dict


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(2**53), 2**53).map(float)  # integral floats: 1.0 is not an integer
    | st.text(max_size=5)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
)


def accepts(schema: dict[str, Any], value: Any) -> bool:
    try:
        validate(schema, value)
    except SchemaViolation as err:
        assert err.reason in {"wrong_type", "not_allowed_value"}
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(values, st.sampled_from(JSON_TYPES))
@example(True, "integer")
@example(False, "number")
@example(1.0, "integer")
@example(-0.0, "integer")
@example(float("inf"), "number")
@example(2**70, "integer")
def test_each_json_type_admits_exactly_its_own_values(value: Any, kind: str) -> None:
    assert accepts({"type": kind}, value) == reference_type(value, kind)


@settings(max_examples=200, deadline=None)
@given(values, st.lists(st.sampled_from(JSON_TYPES), min_size=1, max_size=3, unique=True))
def test_a_type_list_admits_the_union_and_nothing_else(value: Any, kinds: list[str]) -> None:
    assert accepts({"type": kinds}, value) == any(reference_type(value, k) for k in kinds)
    as_any_of = {"anyOf": [{"type": k} for k in kinds]}
    assert accepts(as_any_of, value) == any(reference_type(value, k) for k in kinds)


@settings(max_examples=200, deadline=None)
@given(st.booleans() | st.integers(-(2**40), 2**40).map(float) | st.text(max_size=4))
def test_booleans_integral_floats_and_numeric_text_are_never_integers(value: Any) -> None:
    params = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    with pytest.raises(SchemaViolation) as info:
        check_arguments(params, {"count": value})
    assert (info.value.reason, info.value.path, info.value.details["field"]) == (
        "wrong_type",
        ("count",),
        "count",
    )
    assert check_arguments(params, {"count": 3}) == {"count": 3}


def test_booleans_are_not_numbers_and_integers_are_numbers() -> None:
    number = {"type": "object", "properties": {"ratio": {"type": "number"}}}
    assert check_arguments(number, {"ratio": 1}) == {"ratio": 1}
    assert check_arguments(number, {"ratio": 0.5}) == {"ratio": 0.5}
    for bad in (True, False, "0.5", None, float("nan"), float("inf")):
        with pytest.raises(SchemaViolation) as info:
            check_arguments(number, {"ratio": bad})
        assert info.value.reason == "wrong_type"


def test_enum_and_const_compare_types_exactly() -> None:
    for schema, bad, good in [
        ({"enum": [1, 2]}, True, 2),
        ({"enum": [1, 2]}, 1.0, 1),
        ({"const": 0}, False, 0),
        ({"const": [1, {"a": True}]}, [1, {"a": 1}], [1, {"a": True}]),
        ({"enum": ["a", None]}, 0, None),
    ]:
        assert not accepts(schema, bad)
        assert accepts(schema, good)


# -- formats -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        (
            "date",
            ["2026-11-29", "2024-02-29"],
            ["2026-13-01", "2023-02-29", "2026-1-5", "29/11/2026", "2026-11-29 "],
        ),
        (
            "date-time",
            ["2026-11-29T12:00:00Z", "2026-11-29T12:00:00.5+01:00", "2026-11-29t12:00:00z"],
            [
                "2026-11-29T12:00:00",
                "2026-11-29 12:00:00Z",
                "2026-11-29T25:00:00Z",
                "2026-11-29T12:00:00+24:00",
            ],
        ),
        ("time", ["12:00:00Z", "23:59:60+05:30"], ["12:00:00", "24:00:00Z", "12:00Z"]),
        (
            "email",
            ["ana@example.com", "a.b+c@host"],
            ["ana", "ana@", "@example.com", "a b@example.com", "a@b@c"],
        ),
        (
            "uri",
            ["https://example.com/a?b=c", "mailto:ana@example.com"],
            ["example.com", "https://exa mple.com"],
        ),
        ("uuid", [str(uuid.UUID(int=7))], [uuid.UUID(int=7).hex, "not-a-uuid"]),
        ("ipv4", ["10.0.0.1"], ["10.0.0.256", "::1"]),
        ("ipv6", ["::1", "fe80::1"], ["10.0.0.1", "gggg::"]),
    ],
)
def test_formats_are_asserted_with_the_standard_library(fmt: str, good: list[str], bad: list[str]) -> None:
    schema = {"type": "string", "format": fmt}
    for text in good:
        validate(schema, text)
    for text in bad:
        with pytest.raises(SchemaViolation) as info:
            validate(schema, text)
        assert info.value.reason == "invalid_format", text
    assert fmt in FORMATS


def test_an_unknown_format_is_an_annotation_only() -> None:
    validate({"type": "string", "format": "x-color"}, "blue")


# -- no remote references, ever ------------------------------------------------------------------


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    body = json.dumps({"type": "string"}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_remote_references_are_never_retrieved_and_local_ones_work(
    counting_server: tuple[str, list[str]],
) -> None:
    url, hits = counting_server
    remote = [
        {"type": "object", "properties": {"x": {"$ref": f"{url}/s.json"}}},
        {"type": "object", "properties": {"x": {"anyOf": [{"type": "null"}, {"$ref": f"{url}/s.json#/a"}]}}},
        {"type": "object", "properties": {"x": {"$ref": "other.json"}}},
        {"$id": f"{url}/root.json", "type": "object", "properties": {"x": {"$ref": "s.json"}}},
        {"$id": "urn:local", "type": "object", "properties": {"x": {"$dynamicRef": f"{url}/d.json#meta"}}},
    ]
    for schema in remote:
        with pytest.raises(UnusableSchema) as info:
            check_arguments(schema, {"x": "v"})
        assert info.value.reason == "unsupported_schema"
        with pytest.raises(UnusableSchema):
            validate(schema, {"x": "v"})
    # A dialect URI is a name: the meta-schema is never fetched either.
    check_arguments(
        {"$schema": f"{url}/meta", "type": "object", "properties": {"x": {"type": "string"}}}, {"x": "v"}
    )
    assert hits == []
    local = {
        "type": "object",
        "$defs": {"Id": {"type": "string", "maxLength": 3}},
        "properties": {"x": {"$ref": "#/$defs/Id"}},
    }
    assert check_arguments(local, {"x": "abc"}) == {"x": "abc"}
    with pytest.raises(SchemaViolation) as too_long:
        check_arguments(local, {"x": "abcd"})
    assert too_long.value.reason == "too_long"
    embedded = {
        "$id": f"{url}/root.json",
        "$defs": {"s": {"$id": "s.json", "type": "string"}},
        "$ref": "s.json",
    }
    validate(embedded, "resolved inside the schema itself")
    assert hits == []


def test_an_invalid_schema_is_unusable_not_a_crash() -> None:
    for schema in ({"type": "text"}, {"properties": {"x": {"pattern": "("}}}, {"minLength": -1}, [1]):
        with pytest.raises(UnusableSchema) as info:
            check_arguments(schema, {})  # type: ignore[arg-type]
        assert info.value.reason == "unsupported_schema"
        assert isinstance(info.value, PolicyError)


# -- the arguments rules ------------------------------------------------------------------------

ORDER = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "maxLength": 10},
        "lines": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            },
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["order_id"],
}


@pytest.mark.parametrize(
    ("arguments", "reason", "field"),
    [
        ({"order_id": "742", "tenant": "other"}, "extra_field", "tenant"),
        ({"lines": []}, "missing_field", "order_id"),
        (
            {"order_id": "742", "lines": [{"sku": "a", "qty": 1}, {"sku": "b"}]},
            "missing_field",
            "lines[1].qty",
        ),
        ({"order_id": "742", "lines": [{"sku": "a", "qty": 0}]}, "out_of_range", "lines[0].qty"),
        ({"order_id": "742", "lines": [{"sku": "a", "qty": 1, "price": 0}]}, "extra_field", "lines[0].price"),
        ({"order_id": "742", "lines": [{"sku": " ", "qty": 1}]}, "blank_string", "lines[0].sku"),
        ({"order_id": "742", "labels": {"k": 1}}, "wrong_type", "labels.k"),
        ({"order_id": "742", "labels": {"k": ""}}, "blank_string", "labels.k"),
        ({"order_id": "x" * 11}, "too_long", "order_id"),
        ({"order_id": "742", "lines": [{"sku": "a", "qty": 1}] * 4}, "out_of_range", "lines"),
    ],
)
def test_errors_name_the_argument_path(arguments: dict[str, Any], reason: str, field: str) -> None:
    with pytest.raises(SchemaViolation) as info:
        check_arguments(ORDER, arguments)
    assert (info.value.reason, info.value.details["field"]) == (reason, field)
    assert field.split(".")[0].split("[")[0] in str(info.value)
    ok = {"order_id": "742", "lines": [{"sku": "a", "qty": 2}], "labels": {"any-key": "v"}}
    assert check_arguments(ORDER, ok) == ok


def test_closing_objects_never_weakens_a_condition() -> None:
    params = {
        "type": "object",
        "properties": {"kind": {"type": "string"}, "limit": {"type": "integer"}},
        "if": {"properties": {"kind": {"const": "bulk"}}, "required": ["kind"]},
        "then": {"properties": {"limit": {"maximum": 10}}},
        "not": {"properties": {"kind": {"const": "forbidden"}}, "required": ["kind"]},
    }
    for bad in ({"kind": "bulk", "limit": 50}, {"kind": "forbidden", "limit": 1}):
        with pytest.raises(SchemaViolation):
            check_arguments(params, bad)
    for good in ({"kind": "bulk", "limit": 5}, {"kind": "one", "limit": 50}, {"kind": "forbidden-not"}):
        assert check_arguments(params, good) == good


def test_results_use_the_plain_rules_extra_keys_and_blank_text_allowed() -> None:
    out = {"type": "object", "properties": {"n": {"type": "integer"}}}
    validate(out, {"n": 1, "note": ""})
    with pytest.raises(SchemaViolation) as info:
        validate(out, {"n": 1.0})
    assert (info.value.reason, info.value.details["field"]) == ("wrong_type", "n")


def test_nesting_beyond_the_limit_is_too_deep() -> None:
    value: Any = "leaf"
    for _ in range(engine.MAX_DEPTH):
        value = [value]
    with pytest.raises(SchemaViolation) as info:
        check_arguments({"type": "object", "properties": {"x": {}}}, {"x": value})
    assert info.value.reason == "too_deep"
    check_arguments({"type": "object", "properties": {"x": {}}}, {"x": value[0]})


def test_compiled_schemas_are_cached_by_identity_and_by_content() -> None:
    a = {"type": "object", "properties": {"q": {"type": "string"}}}
    b = json.loads(json.dumps(a))
    assert compile_schema(a, intake=True) is compile_schema(a, intake=True)
    assert compile_schema(b, intake=True) is compile_schema(a, intake=True)
    assert compile_schema(a) is not compile_schema(a, intake=True)


# -- tool contracts: what pydantic declares is what the engine checks ----------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: Annotated[str, Field(min_length=2, description="City.")]
    zip_code: str | None = None


@tool(effect=Effect.WRITE)
def ship(
    count: Annotated[int, Field(ge=1, le=5, description="How many.")],
    code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", min_length=3, description="Code.")],
    mode: Annotated[Literal["air", "sea"], Field(description="Mode.")] = "sea",
    priority: Annotated[Literal[1, 2], Field(description="Priority.")] = 1,
    color: Annotated[Color, Field(description="Color.")] = Color.RED,
    ratio: Annotated[float, Field(ge=0, le=1, description="Ratio.")] = 0.5,
    to: Annotated[Address | None, Field(description="Address.")] = None,
    stops: Annotated[list[Address], Field(max_length=2, description="Stops.")] = [],  # noqa: B006
    when: Annotated[dt.date | None, Field(description="Day.")] = None,
    at: Annotated[dt.datetime | None, Field(description="Time.")] = None,
    ref: Annotated[uuid.UUID | None, Field(description="Reference.")] = None,
    pair: Annotated[tuple[int, str] | None, Field(description="A pair.")] = None,
    tags: Annotated[set[str] | None, Field(description="Tags.")] = None,
    sizes: Annotated[dict[str, int] | None, Field(description="Sizes.")] = None,
) -> dict[str, Any]:
    """Ship something."""
    return {
        "count": count,
        "color": color.value,
        "to": to.city if to else None,
        "when": when.isoformat() if when else None,
        "at": at.isoformat() if at else None,
        "ref": ref.hex if ref else None,
        "pair": list(pair) if pair else None,
        "tags": sorted(tags) if tags else None,
        "stops": [s.city for s in stops],
    }


GOOD = {"count": 2, "code": "ABC"}


@pytest.mark.parametrize(
    ("extra", "reason", "field"),
    [
        ({"count": 0}, "out_of_range", "count"),
        ({"count": 6}, "out_of_range", "count"),
        ({"count": "2"}, "wrong_type", "count"),
        ({"count": 2.0}, "wrong_type", "count"),
        ({"count": True}, "wrong_type", "count"),
        ({"code": "abc"}, "not_allowed_value", "code"),
        ({"code": "AB"}, "too_short", "code"),
        ({"mode": "rail"}, "not_allowed_value", "mode"),
        ({"priority": 3}, "not_allowed_value", "priority"),
        ({"priority": "1"}, "wrong_type", "priority"),
        ({"color": "green"}, "not_allowed_value", "color"),
        ({"ratio": 1.5}, "out_of_range", "ratio"),
        ({"ratio": "0.5"}, "wrong_type", "ratio"),
        ({"to": {"city": "X"}}, "too_short", "to.city"),
        ({"to": {"city": "Porto", "country": "PT"}}, "extra_field", "to.country"),
        ({"to": {}}, "missing_field", "to.city"),
        ({"to": "Porto"}, "wrong_type", "to"),
        ({"stops": [{"city": "AA"}] * 3}, "out_of_range", "stops"),
        ({"stops": [{"city": "AA"}, {"city": 7}]}, "wrong_type", "stops[1].city"),
        ({"when": "2026-02-30"}, "invalid_format", "when"),
        ({"at": "2026-11-29T12:00:00"}, "invalid_format", "at"),
        ({"ref": "1234"}, "invalid_format", "ref"),
        ({"pair": [1, 2]}, "wrong_type", "pair[1]"),
        ({"pair": [1]}, "out_of_range", "pair"),
        ({"tags": ["a", "a"]}, "not_unique", "tags"),
        ({"sizes": {"m": "1"}}, "wrong_type", "sizes.m"),
        ({"shipper": "me"}, "extra_field", "shipper"),
    ],
)
def test_a_pydantic_contract_is_enforced_by_the_engine(
    extra: dict[str, Any], reason: str, field: str
) -> None:
    with pytest.raises(SchemaViolation) as info:
        check_arguments(ship.spec.parameters, {**GOOD, **extra})
    assert (info.value.reason, info.value.details["field"]) == (reason, field)
    with pytest.raises(ToolInputError) as as_tool:
        ship.validate({**GOOD, **extra})
    assert as_tool.value.details["reason"] == reason


def test_accepted_arguments_are_built_into_typed_values_with_defaults() -> None:
    arguments = {
        **GOOD,
        "mode": "air",
        "priority": 2,
        "color": "blue",
        "ratio": 1,
        "to": {"city": "Porto"},
        "stops": [{"city": "Braga", "zip_code": None}],
        "when": "2026-11-29",
        "at": "2026-11-29T12:00:00+01:00",
        "ref": str(uuid.UUID(int=7)),
        "pair": [1, "a"],
        "tags": ["b", "a"],
        "sizes": {"m": 1},
    }
    assert ship.validate(arguments) == arguments
    built = ship.build(arguments)
    assert built["color"] is Color.BLUE and isinstance(built["to"], Address)
    assert built["when"] == dt.date(2026, 11, 29) and built["at"].utcoffset() == dt.timedelta(hours=1)
    assert built["pair"] == (1, "a") and built["tags"] == {"a", "b"} and built["ratio"] == 1.0
    out = anyio.run(ship.invoke, arguments)
    assert out.data["color"] == "blue" and out.data["stops"] == ["Braga"] and out.data["tags"] == ["a", "b"]
    defaults = ship.build(GOOD)
    assert (defaults["mode"], defaults["color"], defaults["to"], defaults["stops"]) == (
        "sea",
        Color.RED,
        None,
        [],
    )


nonblank = st.text(min_size=1, max_size=4).filter(str.strip)
address = st.fixed_dictionaries(
    {"city": nonblank.filter(lambda t: len(t) >= 2)}, optional={"zip_code": st.none() | nonblank}
)
zones = st.sampled_from(
    [dt.UTC, dt.timezone(dt.timedelta(hours=-3)), dt.timezone(dt.timedelta(hours=5, minutes=30))]
)
valid_values: dict[str, st.SearchStrategy[Any]] = {
    "count": st.integers(1, 5),
    "code": st.from_regex(r"[A-Z]{3}", fullmatch=True),
    "mode": st.sampled_from(["air", "sea"]),
    "priority": st.sampled_from([1, 2]),
    "color": st.sampled_from(["red", "blue"]),
    "ratio": st.floats(0, 1) | st.integers(0, 1),
    "to": st.none() | address,
    "stops": st.lists(address, max_size=2),
    "when": st.dates().map(dt.date.isoformat),
    "at": st.datetimes(timezones=zones).map(dt.datetime.isoformat),
    "ref": st.uuids().map(str),
    "pair": st.tuples(st.integers(), nonblank).map(list),
    "tags": st.lists(nonblank, max_size=3, unique=True),
    "sizes": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
}
odd_address = st.fixed_dictionaries(
    {"city": st.text(max_size=3)}, optional={"zip_code": scalars, "x": scalars}
)
odd_values: dict[str, st.SearchStrategy[Any]] = {
    "count": st.integers(-1, 7) | st.sampled_from([1.0, True, "2"]),
    "code": st.text(max_size=4) | st.from_regex(r"[A-Za-z]{2,4}", fullmatch=True),
    "mode": st.sampled_from(["rail", "AIR", "", 1]),
    "priority": st.sampled_from([3, "1", True, 1.0, 0]),
    "color": st.sampled_from(["green", "RED", "Blue", 0]),
    "ratio": st.floats(allow_nan=False) | st.sampled_from([True, "0.5", None]),
    "to": odd_address | scalars,
    "stops": st.lists(odd_address, max_size=3),
    "when": st.sampled_from(["2026-02-30", "2026-1-1", "29/11/2026", "2026-11-29T00:00:00Z"]),
    "at": st.datetimes().map(dt.datetime.isoformat) | st.dates().map(dt.date.isoformat),
    "ref": st.uuids().map(lambda u: u.hex) | st.text(max_size=5),
    "pair": st.lists(st.integers() | st.text(max_size=2), max_size=3),
    "tags": st.lists(st.text(max_size=2), max_size=3),
    "sizes": st.dictionaries(st.text(max_size=3), scalars, max_size=2),
    "extra": scalars,
}


@st.composite
def mutated_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """Valid arguments with up to two values replaced by one of the right shape but maybe wrong."""
    names = [k for k in valid_values if k in ("count", "code") or draw(st.booleans())]
    arguments = {k: draw(valid_values[k]) for k in names}
    for name in draw(st.lists(st.sampled_from(sorted(odd_values)), max_size=2, unique=True)):
        arguments[name] = draw(odd_values[name])
    return arguments


@settings(max_examples=500, deadline=None)
@given(mutated_arguments())
def test_whatever_the_engine_accepts_pydantic_builds_without_coercion(arguments: dict[str, Any]) -> None:
    try:
        accepted = ship.validate(arguments)
    except ToolInputError as err:
        assert err.details["reason"] and err.details["field"]
        return
    built = ship.build(accepted)  # must not fail: the two never disagree on what is valid
    for name in ("count", "code", "mode", "priority"):
        if name in accepted:  # nothing coerced: the value the engine accepted is the value the tool gets
            assert built[name] == accepted[name] and type(built[name]) is type(accepted[name])


def test_the_gate_runs_one_schema_check_per_call_and_a_refused_call_never_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.core.messages import ToolCall
    from tether.host import Host
    from tether.policy import Policy, TrustedContext

    ran: list[int] = []

    @tool
    def add(n: Annotated[int, Field(description="A number.")]) -> int:
        """Add one."""
        ran.append(n)
        return n + 1

    checks: list[int] = []
    real = engine.CompiledSchema.violations

    def counted(self: engine.CompiledSchema, instance: Any) -> list[SchemaViolation]:
        checks.append(1)
        return real(self, instance)

    monkeypatch.setattr(engine.CompiledSchema, "violations", counted)
    host = Host(policy=Policy(allow=["add"]))
    host.add_tools(add)
    anyio.run(host.start)
    context = TrustedContext(tenant="t")
    coerced = host._gate(ToolCall("c1", "add", '{"n": "1"}'), context, host.offered())
    assert coerced.status == "reject" and "wrong_type" in (coerced.error or "") and checks == [1]
    outcome = host._gate(ToolCall("c2", "add", '{"n": 1}'), context, host.offered())
    assert outcome.status == "allow" and outcome.arguments == {"n": 1} and checks == [1, 1]
    out = anyio.run(add.invoke, outcome.arguments)
    assert out.text == "2" and ran == [1]
    assert checks == [1, 1]  # running the tool builds typed arguments without a second schema check


_FLAT = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "minLength": 2, "maxLength": 5, "description": "k"},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "x": {"type": "number", "minimum": -1.5},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "none": {"type": "null"},
    },
    "required": ["key"],
    "additionalProperties": False,
}
_ARGUMENT = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.floats(-3, 12),
    st.sampled_from(["a", "b", "c", "ab", "abcde", "abcdef", " "]),
    st.text(max_size=7),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(["key", "n", "x", "flag", "mode", "none", "other"]), _ARGUMENT))
@example({"key": "abcdef"})
@example({"key": "a"})
@example({"key": "abc", "n": 10})
@example({"key": "abc", "n": -1})
@example({"key": "abc", "x": -2})
@example({"key": "abc", "mode": "c"})
@example({"key": "abc", "n": True})
@example({"key": "abc", "x": float("nan")})
@example({"key": "abc", "mode": "a", "n": 9, "x": -1.5, "flag": False, "none": None})
def test_flat_schemas_are_answered_without_the_validator_exactly_as_with_it(
    arguments: dict[str, Any],
) -> None:
    compiled = compile_schema(_FLAT, intake=True)
    assert compiled._valid is not None  # a flat schema: the fast answer is used
    full = dataclasses.replace(compiled, _valid=None)
    assert [(v.reason, v.path) for v in compiled.violations(arguments)] == [
        (v.reason, v.path) for v in full.violations(arguments)
    ]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}},
        {"type": "object", "properties": {"v": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"o": {"type": "object", "properties": {}}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {}},
    ],
)
def test_schemas_beyond_flat_primitives_always_go_to_the_validator(schema: dict[str, Any]) -> None:
    assert compile_schema(schema, intake=True)._valid is None
