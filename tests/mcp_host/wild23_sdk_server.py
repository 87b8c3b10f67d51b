"""A server on the official SDK, for the twenty-third round of wild servers, written as a user
writes one: its tool ``find`` takes a pydantic model (nested: ``$defs``/``$ref``; a union:
``anyOf``; ``extra="forbid"``: ``additionalProperties: false``) and returns one (structured
output, an ``outputSchema``). Run as ``python wild23_sdk_server.py`` (stdio)."""

from mcp.server import MCPServer
from pydantic import BaseModel, ConfigDict

mcp = MCPServer("Finder")


class Range(BaseModel):
    model_config = ConfigDict(extra="forbid")
    low: int
    high: int


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    within: Range | None = None
    by: str | int = "name"


class Found(BaseModel):
    key: str
    value: str
    by: str


@mcp.tool()
def find(query: Query) -> Found:
    """Finds a key."""
    return Found(key=query.key, value=f"value-of-{query.key}", by=repr(query.by))


if __name__ == "__main__":
    mcp.run()
