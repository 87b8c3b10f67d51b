"""Every example in the documentation runs, and every CLI transcript is what the command prints.

The pages (docs/**/*.md and README.md) are read as a reader would follow them, each in a fresh
empty folder:

- a fenced block with a title (```` ```python title="tools.py" ````, ```` ```yaml title="agent.yaml" ````)
  is a file the reader creates: it is written into the folder;
- a ```` ```python ```` block without a title is run, in order, in one namespace per page, with the
  folder as the working directory (top-level ``await`` allowed);
- a ```` ```console ```` block is a transcript: each ``$ command`` line is run with bash in the folder
  and what it prints must be the lines that follow it. Ids, times and the folder's path differ
  from run to run, so both sides are normalised: a run id or proposal id is replaced by its order
  of first appearance on the page (so ``tether approvals approve <the id printed above>`` runs with
  the id this run printed), a timestamp by ``TIME``, the folder by ``/home/you/orders``.

Other fences (```` ```bash ````, ```` ```yaml ```` without a title, ```` ```text ````) are shown, not run.

Two comments, invisible on the site, say what a page needs beyond an empty folder:

- ``<!-- continues: PAGE FILE… -->`` (anywhere): the reader starts with these files of another
  page (``tutorial/first-agent.md tools.py``), written before this page's blocks;
- ``<!-- needs: SERVICE -->`` on the line before a fence: the block talks to a service that the
  suite does not start (``llama-server``: a real model, tests/docs/test_local_model.py). Here it
  is shown, not run; a test that starts the service follows the page with ``services=``, and the
  address the page shows is replaced by the real one in files and commands (and back in output).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import inspect
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w+)?([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
TITLE = re.compile(r'title="([^"]+)"')
HOME = "/home/you/orders"
IDS = (
    ("RUN", re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{8}\b")),
    ("PROPOSAL", re.compile(r"\bprop_[0-9a-f]{32}\b")),
)
TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(\+00:00|Z)?")


NEEDS = re.compile(r"<!-- needs: ([a-z-]+) -->\s*$")
CONTINUES = re.compile(r"^<!-- continues: (\S+)((?: \S+)+) -->$", re.MULTILINE)


@dataclass
class Block:
    lang: str
    title: str | None
    body: str
    line: int
    needs: str | None = None


def blocks(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        title = TITLE.search(m.group(2) or "")
        line = text.count("\n", 0, m.start()) + 1
        needs = NEEDS.search(text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1])
        name = title.group(1) if title else None
        out.append(Block(m.group(1) or "", name, m.group(3), line, needs.group(1) if needs else None))
    return out


@dataclass(frozen=True)
class Service:
    """A running service a page needs: the address the page shows and the one it really has."""

    shown: str
    real: str


def runnable(page: Path) -> bool:
    return any(b.lang in ("python", "console") for b in blocks(page.read_text(encoding="utf-8")))


@dataclass
class Names:
    """Run-specific ids by order of first appearance: the doc's and this run's, side by side."""

    doc: dict[str, str] = field(default_factory=dict)
    real: dict[str, str] = field(default_factory=dict)

    def normalise(self, text: str, seen: dict[str, str]) -> str:
        for label, pattern in IDS:

            def name(m: re.Match[str], label: str = label) -> str:
                if m.group(0) not in seen:
                    count = sum(1 for v in seen.values() if v.startswith(label))
                    seen[m.group(0)] = f"<{label}{count + 1}>"
                return seen[m.group(0)]

            text = pattern.sub(name, text)
        return TIME.sub("TIME", text)

    def command(self, line: str) -> str:
        """A command as written in the doc, with the ids this run printed in place of the doc's."""
        real_of = {placeholder: real for real, placeholder in self.real.items()}
        for _label, pattern in IDS:
            line = pattern.sub(lambda m: real_of.get(self.doc.get(m.group(0), ""), m.group(0)), line)
        return line


def transcript(block: Block) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for raw in block.body.splitlines():
        if raw.startswith("$ "):
            steps.append((raw[2:], []))
        elif steps:
            steps[-1][1].append(raw)
        else:
            raise AssertionError(f"line {block.line}: a console block must start with '$ command'")
    return steps


def tidy(lines: list[str]) -> list[str]:
    return [" ".join(line.split()) for line in lines if line.strip()]


def run_python(code: str, namespace: dict[str, object], where: str) -> None:
    tree = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(tree, namespace)  # a page's example, as its reader runs it
    if inspect.iscoroutine(result):
        asyncio.run(result)


def env_for(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    env["TETHER_OUT"] = str(folder / "tether-output")
    env["COLUMNS"] = "100"
    env.pop("TETHER_TRACE_STRICT", None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    follow_page(page, tmp_path, monkeypatch)


def follow_page(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, services: dict[str, Service] | None = None
) -> int:
    """Follow ``page`` as its reader would, in a fresh folder under ``tmp_path``; blocks that need
    a service not in ``services`` are shown, not run. Returns how many commands ran."""
    services = services or {}
    folder = tmp_path / "orders"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    for key, value in env_for(folder).items():
        monkeypatch.setenv(key, value)
    names = Names()
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    rel = page.relative_to(ROOT)
    text = page.read_text(encoding="utf-8")

    def real(body: str) -> str:
        for service in services.values():
            body = body.replace(service.shown, service.real)
        return body

    for earlier, files in CONTINUES.findall(text):
        given = {b.title: b.body for b in blocks((ROOT / "docs" / earlier).read_text(encoding="utf-8"))}
        for name in files.split():
            assert name in given, f"{rel}: {earlier} has no file {name}"
            (folder / name).write_text(given[name], encoding="utf-8")
    ran = 0
    for block in blocks(text):
        where = f"{rel}:{block.line}"
        if block.needs is not None and block.needs not in services:
            continue  # shown here; run by the test that starts the service
        if block.title is not None:
            (folder / block.title).parent.mkdir(parents=True, exist_ok=True)
            (folder / block.title).write_text(real(block.body), encoding="utf-8")
        elif block.lang == "python":
            run_python(block.body, namespace, where)
        elif block.lang == "console":
            for command, expected in transcript(block):
                proc = subprocess.run(
                    ["bash", "-c", real(names.command(command))],
                    cwd=folder,
                    env=env_for(folder),
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                printed = (proc.stdout + proc.stderr).replace(str(folder), HOME)
                for service in services.values():
                    printed = printed.replace(service.real, service.shown)
                got = tidy(names.normalise(printed, names.real).splitlines())
                want = tidy(names.normalise("\n".join(expected), names.doc).splitlines())
                assert got == want, f"{where}: $ {command}\n--- printed:\n{printed}"
                ran += 1
    return ran


def test_the_harness_reads_fences_titles_and_transcripts() -> None:
    text = (
        '```python title="a.py"\nx = 1\n```\n\n```console\n$ echo hi\nhi\n$ true\n```\n'
        "```python\nprint(1)\n```\n"
    )
    found = blocks(text)
    assert [(b.lang, b.title) for b in found] == [("python", "a.py"), ("console", None), ("python", None)]
    assert transcript(found[1]) == [("echo hi", ["hi"]), ("true", [])]
    names = Names()
    doc = names.normalise("run 20261201T181857-9e6c003c at 2026-12-01T18:18:57+00:00", names.doc)
    real = names.normalise("run 20270101T000000-00000000 at 2027-01-01T00:00:00.5+00:00", names.real)
    assert doc == real == "run <RUN1> at TIME"
    assert names.command("tether resume 20261201T181857-9e6c003c") == "tether resume 20270101T000000-00000000"
    assert names.command("tether resume 20991201T181857-9e6c003c") == "tether resume 20991201T181857-9e6c003c"


def test_the_harness_reads_what_a_page_needs_and_continues_from() -> None:
    text = (
        "<!-- continues: tutorial/first-agent.md tools.py steps.yaml -->\n\n"
        "<!-- needs: llama-server -->\n```console\n$ tether run x\n```\n\n"
        "<!-- needs: llama-server -->\nA paragraph between.\n\n```console\n$ true\n```\n"
    )
    first, second = blocks(text)
    assert first.needs == "llama-server" and second.needs is None  # only the line right above
    assert CONTINUES.findall(text) == [("tutorial/first-agent.md", " tools.py steps.yaml")]
    local = (ROOT / "docs" / "tutorial" / "local-model.md").read_text(encoding="utf-8")
    shown = [b for b in blocks(local) if b.lang == "console"]
    assert shown and all(b.needs == "llama-server" for b in shown)  # none of them runs without it


# -- every tether command line shown in the docs exists ---------------------------------------


def _sub_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public walk of its sub-commands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def shown_commands() -> list[tuple[str, str]]:
    """Every ``tether …`` command line in a bash or console block: (where, line)."""
    out = []
    for page in PAGES:
        rel = page.relative_to(ROOT)
        for block in blocks(page.read_text(encoding="utf-8")):
            if block.lang not in ("bash", "console"):
                continue
            joined = block.body.replace("\\\n", " ")  # continued lines are one command
            for n, raw in enumerate(joined.splitlines()):
                line = raw[2:] if raw.startswith("$ ") else raw
                code = line.split(" #", 1)[0]
                for part in re.split(r"&&|;|\|\|", code):
                    words = part.split()
                    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                        words = words[1:]  # VAR=value before the command
                    if words and words[0] == "tether":
                        out.append((f"{rel}:{block.line + n + 1}", " ".join(words)))
    return out


def test_every_tether_command_shown_in_the_docs_exists_with_its_options() -> None:
    from tether.cli import build_parser

    commands = shown_commands()
    assert len(commands) > 50  # the pages are full of them: an empty list means a broken reader
    problems = []
    for where, line in commands:
        parser, path = build_parser(), ["tether"]
        known: set[str] = set()
        try:
            words = shlex.split(line, posix=True)[1:]
        except ValueError:  # an unbalanced quote in a shown fragment: plain words are enough here
            words = line.split()[1:]
        for word in words:
            if any(a.nargs == argparse.REMAINDER for a in parser._actions):
                break  # the rest belongs to a plug-in's own parser (tether demo NAME …)
            known |= {o for a in parser._actions for o in a.option_strings}
            subs = _sub_actions(parser)
            if word.startswith("-"):
                if word.split("=", 1)[0] not in known:
                    problems.append(f"{where}: {' '.join(path)}: no option {word} ({line})")
            elif subs and word in subs:
                parser, path = subs[word], [*path, word]
            elif subs and word.isidentifier() and word.islower() and len(path) == 1:
                problems.append(f"{where}: no command {' '.join([*path, word])} ({line})")
    assert problems == []
