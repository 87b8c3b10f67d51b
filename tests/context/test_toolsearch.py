"""C5: tool search — names and one-liners in the prefix, BM25 search, schemas appended once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
from ctx_helpers import CTX, agent_with, host_with
from pydantic import Field

from tether import Tool, tool
from tether.context import ContextConfig, ToolSearchConfig
from tether.context._bm25 import BM25, tokenize
from tether.core.messages import ToolMessage
from tether.testing import ScriptedModel, call

TOPICS = [
    ("weather_forecast", "Forecast the weather for a city over the next days."),
    ("currency_convert", "Convert an amount between two currencies at today's rate."),
    ("invoice_lookup", "Look up an invoice by its number and return its lines and total."),
    ("flight_status", "Status of a flight by flight number: delays, gate, terminal."),
    ("calendar_free_slots", "Free slots in a person's calendar on a given day."),
    ("translate_text", "Translate a text into another language."),
    ("stock_quote", "Latest quote of a stock ticker."),
    ("package_tracking", "Track a parcel by its carrier tracking number."),
    ("hotel_search", "Search hotels in a city for given dates."),
    ("timezone_convert", "Convert a time between two time zones."),
]


def _make(name: str, doc: str) -> Tool:
    def fn(
        key: Annotated[str, Field(min_length=1, description="The main input, e.g. an id or a name.")],
        detail: Annotated[int, Field(ge=0, le=10, description="Detail level 0-10.")] = 1,
    ) -> str:
        return f"{name}({key}, {detail}) ok"

    fn.__doc__ = doc
    return tool(fn, name=name)


TOOLS = [_make(n, d) for n, d in TOPICS]


def test_bm25_ranks_the_matching_document_first() -> None:
    index = BM25(["weather forecast city", "convert currency amount", "track parcel tracking number"])
    assert index.top("parcel tracking", 2)[0][0] == 2
    assert index.top("unrelated words", 3) == []
    assert tokenize("invoice_lookup byNumber") == ["invoice", "lookup", "by", "number"]


@pytest.mark.spec("C5")
@pytest.mark.anyio
async def test_many_tools_are_deferred_and_search_appends_full_schemas_once(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            call("package_tracking", key="1Z999"),  # before its schema was loaded: refused with a hint
            call("tool_search", query="track a parcel by tracking number", limit=2),
            call("tool_search", query="parcel tracking", limit=2),  # already loaded: not appended again
            call("package_tracking", key="1Z999", detail=99),  # validated against the full schema
            call("package_tracking", key="1Z999", detail=2),
            "Your parcel is on its way.",
        ]
    )
    config = ContextConfig(tool_search=ToolSearchConfig(threshold=5, always_loaded=("weather_forecast",)))
    host = host_with(tmp_path, *TOOLS)
    result = await host.run(agent_with(model, config), "Where is my parcel 1Z999?", context=CTX)
    assert result.ok
    first = model.requests[0]
    by_name = {t["function"]["name"]: t["function"] for t in first.tools}
    assert by_name["weather_forecast"]["parameters"]["properties"]  # kept in full
    stub = by_name["package_tracking"]
    assert stub["parameters"] == {"type": "object"} and "tool_search" in stub["description"]
    assert stub["description"].startswith("Track a parcel by its carrier tracking number.")
    assert "tool_search" in by_name
    assert all(r.tools == first.tools for r in model.requests)  # the prefix never changes
    results = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "schema of package_tracking is not loaded" in results[0].content
    found = json.loads(results[1].content.split("\n", 1)[1].rsplit("\n", 1)[0])
    assert found["tools"][0]["name"] == "package_tracking"
    assert found["tools"][0]["parameters"]["properties"]["detail"]["maximum"] == 10
    again = json.loads(results[2].content.split("\n", 1)[1].rsplit("\n", 1)[0])
    assert again["tools"] == [] and again["already_loaded"] == ["package_tracking"]
    assert "detail" in results[3].content and "ok" not in results[3].content  # 99 > 10 rejected
    assert "package_tracking(1Z999, 2) ok" in results[4].content
    assert [c.status for c in result.calls if c.tool == "package_tracking"] == ["rejected", "rejected", "ok"]
    loads = [e.data["tools"] for e in result.events if str(e.kind) == "tool_schemas_loaded"]
    assert loads[0][0] == "package_tracking" and loads[1] == []


@pytest.mark.spec("C5")
@pytest.mark.anyio
async def test_below_the_threshold_every_schema_is_in_the_prefix(tmp_path: Path) -> None:
    model = ScriptedModel([call("stock_quote", key="ACME"), "ACME is up."])
    config = ContextConfig(tool_search=ToolSearchConfig(threshold=20))
    result = await host_with(tmp_path, *TOOLS).run(agent_with(model, config), "ACME?", context=CTX)
    assert result.ok
    names = [t["function"]["name"] for t in model.requests[0].tools]
    assert "tool_search" not in names and len(names) == len(TOOLS)
    assert all(t["function"]["parameters"].get("properties") for t in model.requests[0].tools)
