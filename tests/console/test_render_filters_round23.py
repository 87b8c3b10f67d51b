"""The console's templates and what feeds them: each filter it registers is used by a template, and
each value a page hands a template is read by it (issue 23: no dead copies; what no template reads
is code no test of a page can reach)."""

from __future__ import annotations

import ast
from pathlib import Path

from jinja2 import Environment, meta, nodes

from tether.console._render import _TEMPLATES, environment


def test_every_filter_the_console_registers_is_used_by_a_template() -> None:
    env = environment()
    ours = set(env.filters) - set(Environment().filters)
    used: set[str] = set()
    for path in sorted(_TEMPLATES.rglob("*.html")):
        tree = env.parse(path.read_text(encoding="utf-8"))
        used |= {f.name for f in tree.find_all(nodes.Filter)}
    assert {"reveal", "seg", "pretty"} <= ours  # the pages' own filters are registered
    assert ours <= used, f"registered, used by no template: {sorted(ours - used)}"


def _read_by(env: Environment, name: str) -> set[str]:
    """The variables a template reads, with those of the templates it extends or includes."""
    tree = env.parse((_TEMPLATES / name).read_text(encoding="utf-8"))
    found = set(meta.find_undeclared_variables(tree))
    for other in meta.find_referenced_templates(tree):
        found |= _read_by(env, other) if other else set()
    return found


def test_every_value_a_page_hands_its_template_is_read_by_it() -> None:
    env = environment()
    handed: list[tuple[str, str, str]] = []
    for path in sorted(Path(_TEMPLATES).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            names = [a for a in args if str(a).endswith(".html")]
            handed += [(path.name, str(names[0]), kw.arg) for kw in node.keywords if names and kw.arg]
    assert ("_pages.py", "run.html", "checkpoint") in handed  # the pages' calls are found
    unread = [h for h in handed if h[2] not in _read_by(env, h[1])]
    assert not unread, f"handed to a template that never reads it: {unread}"
