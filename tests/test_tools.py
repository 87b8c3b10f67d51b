"""Tool contracts from typed functions (T1) and strict argument validation."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from tether import Effect, Target, ToolContext, tool
from tether.errors import ToolInputError, UpstreamError
from tether.tools import Tool


class Order(BaseModel):
    order_id: str
    status: str


@tool(effect=Effect.READ, target=Target("order_id", "order"))
async def read_order(
    order_id: Annotated[str, Field(description="Work order id, e.g. '742'.", min_length=1, max_length=20)],
    context: ToolContext,
) -> Order:
    """Read one work order of the caller's tenant."""
    return Order(order_id=order_id, status=f"open for {context.tenant}")


def ctx() -> ToolContext:
    return ToolContext(run_id="r", tenant="shopping-a", roles=frozenset(), user=None, call_id="c1")


@pytest.mark.spec("T1")
def test_schema_comes_from_types_with_a_description_per_argument_and_no_host_fields() -> None:
    spec = read_order.spec
    assert spec.name == "read_order"
    assert spec.description == "Read one work order of the caller's tenant."
    assert spec.effect is Effect.READ and spec.target == Target("order_id", "order")
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "order_id": {
                "type": "string",
                "description": "Work order id, e.g. '742'.",
                "minLength": 1,
                "maxLength": 20,
            }
        },
        "required": ["order_id"],
        "additionalProperties": False,
    }
    # The tenant comes from the host (ToolContext): the model cannot even name it.
    assert "context" not in spec.parameters["properties"]


@pytest.mark.spec("T1")
def test_an_argument_without_description_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="has no description"):

        @tool
        def vague(query: str) -> str:
            """Runs anything."""
            return query


def test_the_contract_options_default_to_the_specs_and_an_unknown_option_is_refused() -> None:
    @tool
    def lookup(query: Annotated[str, Field(description="What to look up.")]) -> str:
        """Look something up."""
        return query

    spec = lookup.spec
    assert (spec.effect, spec.timeout_s, spec.max_result_chars) == (Effect.READ, 30.0, 20_000)
    assert (spec.target, spec.egress_argument, spec.needs_approval) == (None, None, None)
    assert not spec.idempotent
    assert spec.remote_name == "lookup" and not lookup.inline
    changed = lookup.with_options(name="find", effect=Effect.WRITE, timeout_s=5.0)
    assert (changed.spec.name, changed.spec.effect, changed.spec.timeout_s) == ("find", Effect.WRITE, 5.0)
    assert changed.spec.description == "Look something up."
    with pytest.raises(TypeError, match="unknown tool option"):
        Tool(lookup.function, efect=Effect.WRITE)  # type: ignore[call-arg]


@pytest.mark.spec("T1")
def test_structured_result_and_host_context_injection() -> None:
    out = anyio.run(read_order.invoke, {"order_id": "742"}, ctx())
    assert out.data == {"order_id": "742", "status": "open for shopping-a"}
    assert out.text == '{"order_id": "742", "status": "open for shopping-a"}'


@pytest.mark.spec("T1", "T3")
@pytest.mark.parametrize(
    "arguments",
    [{"order_id": 742}, {"order_id": "742", "tenant": "other"}, {}, {"order_id": ""}, {"order_id": "x" * 21}],
)
def test_arguments_are_validated_strictly_without_coercion(arguments: dict[str, Any]) -> None:
    with pytest.raises(ToolInputError) as err:
        read_order.validate(arguments)
    assert err.value.to_result()["error"] == "invalid_arguments"
    assert read_order.validate({"order_id": "742"}) == {"order_id": "742"}


@pytest.mark.spec("T1")
def test_bound_methods_are_tools_bound_to_their_instance() -> None:
    class Crm:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        @tool(effect=Effect.WRITE, idempotent=True)
        def prepare(self, body: Annotated[str, Field(description="Draft text.")]) -> str:
            """Prepare a draft."""
            return self.prefix + body

    a, b = Crm("A:"), Crm("B:")
    assert isinstance(a.prepare, Tool)
    assert a.prepare.spec.parameters["required"] == ["body"]
    assert anyio.run(a.prepare.invoke, {"body": "hi"}).text == "A:hi"
    assert anyio.run(b.prepare.invoke, {"body": "hi"}).text == "B:hi"


@pytest.mark.spec("T1")
def test_a_tool_that_overruns_its_time_limit_is_an_upstream_error() -> None:
    @tool(timeout_s=0.05)
    async def slow() -> str:
        """Too slow."""
        await anyio.sleep(10)
        return "late"

    with pytest.raises(UpstreamError, match="timed out"):
        anyio.run(slow.invoke, {})


@pytest.mark.spec("T1")
def test_sync_tools_run_in_a_worker_thread() -> None:
    import threading

    main = threading.get_ident()

    @tool
    def where() -> int:
        """Reports its thread."""
        return threading.get_ident()

    assert anyio.run(where.invoke, {}).data != main


def test_a_sync_tool_declared_non_blocking_runs_inline_and_others_in_a_worker_thread() -> None:
    import threading

    from tether.tools._contract import tool as declare

    seen: dict[str, int] = {}

    @declare(blocking=False)
    def quick(x: Annotated[int, Field(description="A number.")]) -> int:
        """Pure computation."""
        seen["quick"] = threading.get_ident()
        return x + 1

    @declare
    def slow(x: Annotated[int, Field(description="A number.")]) -> int:
        """May block on I/O."""
        seen["slow"] = threading.get_ident()
        return x + 2

    async def main() -> int:
        loop_thread = threading.get_ident()
        assert (await quick.invoke({"x": 1})).data == 2
        assert (await slow.invoke({"x": 1})).data == 3
        return loop_thread

    loop_thread = anyio.run(main)
    assert seen["quick"] == loop_thread
    assert seen["slow"] != loop_thread


@tool
async def plain(
    key: Annotated[str, Field(description="A key.")],
    count: Annotated[int, Field(description="How many.")] = 3,
    ratio: Annotated[float | None, Field(description="A ratio.")] = None,
    flag: Annotated[bool, Field(description="A flag.")] = False,
) -> str:
    """A tool whose arguments are bare JSON scalars."""
    return key


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def _slow_build(t: Tool, arguments: dict[str, Any]) -> Any:
    slow = object.__new__(Tool)
    slow.__dict__.update(t.__dict__)
    slow._plain = None  # pydantic's round trip, as for any other tool
    try:
        return slow.build(arguments)
    except ToolInputError as err:
        return ("error", str(err))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["key", "count", "ratio", "flag", "other"]), _JSON, max_size=5).flatmap(
        lambda d: st.sampled_from([d, {"key": "k", **{k: v for k, v in d.items() if k != "key"}}])
    )
)
def test_the_shortcut_for_scalar_arguments_builds_exactly_what_pydantic_builds(
    arguments: dict[str, Any],
) -> None:
    assert plain._plain is not None  # the shortcut is in use for this tool
    try:
        fast: Any = plain.build(arguments)
    except ToolInputError as err:
        fast = ("error", str(err))
    slow = _slow_build(plain, arguments)
    assert fast == slow and [type(v) for v in fast] == [type(v) for v in slow]
    if isinstance(fast, dict):
        assert [type(v) for v in fast.values()] == [type(v) for v in slow.values()]


def test_arguments_with_a_constraint_or_a_model_keep_pydantic_building_them() -> None:
    assert read_order._plain is None  # min_length / max_length: pydantic's own checks run
    built = plain.build({"key": "k", "ratio": 2})
    assert built == {"key": "k", "count": 3, "ratio": 2.0, "flag": False}
    assert type(built["ratio"]) is float
