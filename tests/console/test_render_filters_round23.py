"""The console's template filters: each one it registers is used by a template (issue 23: no dead
copies; a filter no page uses is code no test of a page can reach)."""

from __future__ import annotations

from jinja2 import Environment, nodes

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
