"""`@tool` keeps the decorated function's signature for a type checker (issue 23, item 6).

mypy checks a small module that uses the decorator in each of its forms; a wrong argument
must be reported and the awaited result must keep the function's return type."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

# scripts/test runs ``mypy`` over the library just before the tests: its cache spares checking
# tether and its dependencies again (about 10 s). mypy rechecks whatever changed since, and
# ignores a cache of another version or other options, so the result is the same either way.
REPO_CACHE = Path(__file__).resolve().parents[1] / ".mypy_cache"

SNIPPET = textwrap.dedent(
    '''
    from typing import Annotated

    from pydantic import Field

    from tether import Effect, Tool, tool


    @tool
    async def read_order(order_id: Annotated[str, Field(description="Order id.")]) -> dict[str, int]:
        """Read one order."""
        return {}


    @tool(effect=Effect.WRITE, timeout_s=5.0)
    def close_order(order_id: Annotated[str, Field(description="Order id.")], force: bool = False) -> int:
        """Close one order."""
        return 1


    class Desk:
        @tool
        def note(self, text: Annotated[str, Field(description="Note text.")]) -> str:
            """Write a note."""
            return text


    async def use() -> None:
        reveal_type(await read_order("742"))
        reveal_type(await close_order("742", force=True))
        reveal_type(await Desk().note("hi"))
        tools: list[Tool] = [read_order, close_order, Desk().note]
        await read_order(742)  # wrong type: an error
        await close_order("742", forse=True)  # misspelt keyword: an error
    '''
)


def test_tool_decorator_keeps_signature_for_mypy(tmp_path: Path) -> None:
    module = tmp_path / "uses_tool.py"
    module.write_text(SNIPPET)
    cache = tmp_path / ".mypy"
    if REPO_CACHE.is_dir():  # a copy: the repository's cache is left as it was
        shutil.copytree(REPO_CACHE, cache)
    out, err, _ = api.run(["--strict", "--cache-dir", str(cache), str(module)])
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(module))]
    revealed = [line for line in lines if line.startswith("note: Revealed type")]
    assert revealed == [
        'note: Revealed type is "dict[str, int]"',
        'note: Revealed type is "int"',
        'note: Revealed type is "str"',
    ], out + err
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 2, out + err
    assert 'Argument 1 to "__call__" of "Tool" has incompatible type "int"; expected "str"' in errors[0]
    assert 'Unexpected keyword argument "forse"' in errors[1]
