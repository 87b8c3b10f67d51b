"""Scenarios installed beside tether, found through Python entry points.

tether ships no scenario. A distribution offers some under the entry-point group
``tether.scenarios``: each entry point is named after its scenario and loads a
``ScenarioPlugin`` saying what the scenario brings to the ``tether`` command. Its parts are
``module:attribute`` strings, imported only when their command runs, so listing the
scenarios stays cheap. The reference scenarios (S1–S4) are the ``tether-examples``
distribution in tether's repository (``pip install -e examples``).

    [project.entry-points."tether.scenarios"]
    maintenance = "my_package.plugins:MAINTENANCE"
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

__all__ = [
    "GROUP",
    "INSTALL_HINT",
    "ScenarioPlugin",
    "ScenarioUnavailable",
    "installed",
    "resolve",
    "scenario_with",
]

GROUP = "tether.scenarios"
INSTALL_HINT = (
    "the reference scenarios are not installed: pip install -e examples "
    "(the tether-examples distribution in tether's repository)"
)


@dataclass(frozen=True)
class ScenarioPlugin:
    """What one scenario brings to the command line (its name is its entry point's); every part is optional.

    - ``demos``: ``tether demo NAME`` → ``"module:function"``, the function takes the remaining
      arguments (a list of strings) and returns an exit code;
    - ``lab``: ``tether lab MODE``: a module with ``MODES``, ``EXPECTED`` (mode → (stop reason,
      exit code)) and ``async run_mode(mode, out)``;
    - ``compare``: ``tether compare --scenario NAME``: ``"module:Class"``, an evaluation scenario
      built with the folder for its runs; the module's ``CASES_PATH`` and ``CONFIG_PATH`` are the
      default case file and decision rule;
    - ``run``: ``tether run --scenario NAME`` (and ``tether demo NAME``): a module with
      ``INSTRUCTIONS``, ``make_agent()``, ``make_host(out, inject=, memory=)`` and
      ``memory_store(path)``.
    """

    demos: Mapping[str, str] = field(default_factory=dict)
    lab: str | None = None
    compare: str | None = None
    run: str | None = None


class ScenarioUnavailable(LookupError):
    """No installed scenario offers what a command asked for (the message says what to install)."""


def installed() -> dict[str, ScenarioPlugin]:
    """Every scenario registered under ``GROUP``, by name; a malformed entry is an error, not skipped."""
    plugins: dict[str, ScenarioPlugin] = {}
    for ep in entry_points(group=GROUP):
        plugin = ep.load()
        if not isinstance(plugin, ScenarioPlugin):
            raise TypeError(f"entry point {ep.name} = {ep.value!r} ({GROUP}) is not a ScenarioPlugin")
        plugins[ep.name] = plugin
    return plugins


def scenario_with(part: str, name: str | None = None) -> tuple[str, str]:
    """``(scenario, spec)``: ``part`` (a field of ``ScenarioPlugin``) of scenario ``name``, or of the
    only one offering it. Raises ``ScenarioUnavailable`` (the install hint, or the names that do)."""
    offering = {n: p for n, p in installed().items() if getattr(p, part)}
    if not offering:
        raise ScenarioUnavailable(INSTALL_HINT)
    if name is None:
        if len(offering) > 1:
            raise ScenarioUnavailable(f"name a scenario: {', '.join(sorted(offering))}")
        name = next(iter(offering))
    if name not in offering:
        offered = ", ".join(sorted(offering))
        raise ScenarioUnavailable(f"no installed scenario {name!r} offers this; these do: {offered}")
    spec: str = getattr(offering[name], part)
    return name, spec


def resolve(spec: str) -> Any:
    """``"module"`` → the module; ``"module:attribute"`` → that attribute."""
    module, _, attribute = spec.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded
