"""The scenario commands find their scenarios through entry points, and say what to install without them.

With the examples distribution installed (``pip install -e examples``), ``tether lab``, ``tether
demo`` and ``tether compare`` reach its scenarios through the ``tether.scenarios`` entry points;
without it (a site-packages with everything but that distribution), each exits 1 with a
one-line hint naming the package, and the other commands still work.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from importlib.metadata import distribution
from pathlib import Path

import pytest

from tether.clisupport.scenarios import INSTALL_HINT, ScenarioPlugin, installed, resolve

SCENARIO_COMMANDS = {
    "lab": ["lab", "all"],
    "demo": ["demo", "leads"],
    "demo-run": ["demo", "maintenance", "Why did order 742 fail?"],
    "compare": ["compare", "--scenario", "maintenance", "--repeat", "1"],
    "run": ["run", "Why did order 742 fail?", "--scenario", "maintenance"],
}


def test_the_examples_register_every_reference_scenario_and_each_part_resolves() -> None:
    plugins = installed()
    assert {"maintenance", "leads", "claims", "contract"} <= set(plugins)
    for plugin in plugins.values():
        assert isinstance(plugin, ScenarioPlugin)
    s1 = plugins["maintenance"]
    assert s1.lab and s1.compare and s1.run
    lab = resolve(s1.lab)
    assert set(lab.EXPECTED) <= set(lab.MODES) and callable(lab.run_mode)
    assert callable(resolve(s1.compare)) and resolve(s1.compare.partition(":")[0]).CASES_PATH.is_file()
    for spec in (d for p in plugins.values() for d in p.demos.values()):
        assert callable(resolve(spec)), spec


def test_an_unknown_lab_mode_or_demo_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.cli import main

    assert main(["lab", "nope"]) == 1
    assert "unknown mode 'nope'; one of: clean, workflow" in capsys.readouterr().err
    assert main(["demo", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown demo 'nope'" in err and "leads" in err and "maintenance" in err


def _site_without_examples(tmp_path: Path) -> Path:
    """This interpreter's site-packages, less what the examples distribution installed there (its
    metadata, its modules or its editable path hook: every top-level entry of its RECORD)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    files = distribution("tether-examples").files or []
    hidden = {Path(f).parts[0] for f in files if not Path(f).is_absolute() and Path(f).parts[0] != ".."}
    assert any(name.endswith(".dist-info") for name in hidden), hidden
    site = tmp_path / "site"
    site.mkdir()
    for entry in purelib.iterdir():
        if entry.name not in hidden:
            (site / entry.name).symlink_to(entry)
    return site


SCRIPT = """
import contextlib, io, json, site, sys
site.addsitedir(sys.argv[1])
from tether.cli import main
commands = json.loads(sys.argv[2])
results = {}
for name, argv in commands.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    results[name] = [code, err.getvalue()]
try:
    import tether_examples  # noqa: F401
    results["importable"] = True
except ImportError:
    results["importable"] = False
print(json.dumps(results))
"""


@pytest.mark.slow
def test_without_the_examples_each_scenario_command_exits_1_with_a_one_line_hint(tmp_path: Path) -> None:
    site = _site_without_examples(tmp_path)
    commands = {**SCENARIO_COMMANDS, "other": ["trace", "stats", str(tmp_path / "none.jsonl")]}
    done = subprocess.run(
        [sys.executable, "-S", "-c", SCRIPT, str(site), json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    assert results.pop("importable") is False  # the examples really are absent there
    code, err = results.pop("other")
    assert INSTALL_HINT not in err  # a command that needs no scenario is not told to install one
    for name, (code, err) in results.items():
        assert code == 1, (name, err)
        assert err.count("\n") == 1 and INSTALL_HINT in err, (name, err)
        assert "pip install -e examples" in err and "tether-examples" in err
