"""``import tether`` and ``tether --help`` stay light: heavy modules load on first use."""

from __future__ import annotations

import subprocess
import sys

import tether


def test_every_exported_name_resolves_and_the_export_table_matches_all() -> None:
    assert set(tether._EXPORTS) == set(tether.__all__)
    for name in tether.__all__:
        assert getattr(tether, name) is not None
    assert sorted(dir(tether)) == sorted(tether.__all__)


def test_import_tether_and_help_load_no_pydantic_mcp_or_http_client() -> None:
    probe = (
        "import sys, tether, tether.cli; parser = tether.cli.build_parser(); parser.format_help(); "
        "print(sorted(m for m in ('pydantic', 'mcp', 'httpx2', 'openai', 'anyio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # the lazy names still work in a fresh interpreter
    out = subprocess.run(
        [sys.executable, "-c", "from tether import Host, tool; print(Host.__name__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "Host"
