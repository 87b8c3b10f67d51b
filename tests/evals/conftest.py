import pytest

# mcp.client.stdio binds ``errlog=sys.stderr`` when first imported; importing it here, before
# any test replaces sys.stderr (capsys), keeps the stdio servers' stderr a real file.
import mcp.client.stdio  # noqa: F401  # isort: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
