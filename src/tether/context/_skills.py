"""Skills (C4): folders with a ``SKILL.md`` loaded progressively: the catalog is in the stable
prefix, a body and its files are appended on demand. A skill from an untrusted folder is refused
until its exact content (a sha256 over every file) is approved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from tether.errors import NotFoundError, TetherError, ToolInputError
from tether.tools._contract import Tool, tool

__all__ = ["Skill", "SkillError", "SkillLibrary", "parse_skill_md", "review_folder"]

MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_FILE_BYTES = 256_000
MAX_FILES = 200


class SkillError(TetherError):
    """A SKILL.md that cannot be used (no front matter, missing name/description, …)."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    root: Path
    digest: str
    trusted: bool
    files: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)  # every other front-matter key, kept as given


def parse_skill_md(text: str) -> tuple[dict[str, Any], str]:
    """Split YAML front matter from the body. Raises ``SkillError`` with a precise reason."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillError("SKILL.md must start with a '---' front-matter line")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise SkillError("SKILL.md front matter is not closed by a '---' line")
    head, body = "".join(lines[1:end]), "".join(lines[end + 1 :])
    try:
        meta = yaml.safe_load(head) if head.strip() else {}
    except yaml.YAMLError as err:
        raise SkillError(f"front matter is not valid YAML: {err}") from None
    if not isinstance(meta, dict):
        raise SkillError("front matter must be a mapping of keys to values")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise SkillError("front matter needs a non-empty 'name'")
    if len(name) > MAX_NAME or any(c.isspace() for c in name.strip()) or "/" in name:
        raise SkillError(f"skill name {name!r} must be one word of at most {MAX_NAME} characters")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("front matter needs a non-empty 'description'")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"description longer than {MAX_DESCRIPTION} characters")
    return meta, body.strip("\n")


def _files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if p.is_file() and not p.is_symlink():
            out.append(p)
    return out[: MAX_FILES + 1]


def skill_digest(root: Path) -> str:
    """sha256 over every file's relative path and bytes: what an approval pins."""
    h = hashlib.sha256()
    for p in _files(root):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return "sha256:" + h.hexdigest()


def load_skill_folder(root: Path, *, trusted: bool) -> Skill:
    md = root / "SKILL.md"
    try:
        text = md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SkillError(f"cannot read {md}: {err}") from None
    meta, body = parse_skill_md(text)
    files = [p.relative_to(root).as_posix() for p in _files(root) if p != md]
    return Skill(
        name=meta["name"].strip(),
        description=" ".join(meta["description"].split()),
        body=body,
        root=root.resolve(),
        digest=skill_digest(root),
        trusted=trusted,
        files=tuple(files[:MAX_FILES]),
        meta={k: v for k, v in meta.items() if k not in ("name", "description")},
    )


def _skill_folders(root: Path) -> list[Path]:
    """``root`` itself when it holds a SKILL.md, else its sub-folders that do."""
    if (root / "SKILL.md").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "SKILL.md").is_file())


@dataclass(frozen=True, slots=True)
class Refusal:
    path: str
    reason: str
    digest: str = ""


class SkillLibrary:
    """The skills a host offers. Build it in application code; the model can only read it."""

    def __init__(self) -> None:
        self.skills: dict[str, Skill] = {}
        self.refused: list[Refusal] = []

    def add_folder(self, folder: str | Path, *, trusted: bool, approved: Iterable[str] = ()) -> list[Skill]:
        """Add every skill under ``folder`` (itself, or its sub-folders with a SKILL.md). From an
        untrusted folder only skills whose digest is ``approved``; the others, and bad skills, are
        listed in ``refused`` with their reason (never raises)."""
        root = Path(folder)
        approved_set = set(approved)
        if not root.is_dir():
            self.refused.append(Refusal(str(root), "not a folder"))
            return []
        added = []
        for path in _skill_folders(root):
            try:
                skill = load_skill_folder(path, trusted=trusted)
            except SkillError as err:
                self.refused.append(Refusal(str(path), str(err)))
                continue
            if not trusted and skill.digest not in approved_set:
                why = "untrusted folder: review the skill and approve its digest"
            elif skill.name in self.skills:
                why = f"duplicate skill name {skill.name!r}"
            else:
                self.skills[skill.name] = skill
                added.append(skill)
                continue
            self.refused.append(Refusal(str(path), why, skill.digest))
        return added

    def catalog(self) -> str:
        """Layer 1: names and routing conditions, sorted by name (byte-stable)."""
        if not self.skills:
            return ""
        lines = ["Skills: when a task matches a skill's condition, load it with load_skill before acting."]
        lines.extend(
            f"- {s.name}: {s.description}" for s in sorted(self.skills.values(), key=lambda s: s.name)
        )
        return "\n".join(lines)

    def get(self, name: str) -> Skill:
        try:
            return self.skills[name]
        except KeyError:
            known = ", ".join(sorted(self.skills)) or "none"
            raise NotFoundError(
                f"no skill named {name!r}", hint=f"use a name from the catalog: {known}"
            ) from None

    def body(self, name: str) -> str:
        """Layer 2: the instructions, with the files that may be loaded next."""
        skill = self.get(name)
        text = f"Skill {skill.name} loaded.\n\n{skill.body}"
        if skill.files:
            text += "\n\nFiles of this skill (load with read_skill_file): " + ", ".join(skill.files)
        return text

    def read_file(self, name: str, path: str) -> str:
        """Layer 3: one file of the skill, confined to its folder."""
        skill = self.get(name)
        rel = Path(path)
        target = (skill.root / rel).resolve()
        listed = not rel.is_absolute() and ".." not in rel.parts and path in skill.files
        if not listed or not target.is_relative_to(skill.root) or not target.is_file():
            raise ToolInputError(
                f"{path!r} is not a file of skill {name}",
                hint="use a relative path from the skill's file list",
            )
        data = target.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise ToolInputError(f"{path} is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolInputError(
                f"{path} is not a UTF-8 text file", hint="only text files can be read"
            ) from None

    def expand_command(self, text: str) -> tuple[Skill, str] | None:
        """``/name rest…`` typed by the user → (the skill, the rest), when ``name`` is a known skill."""
        stripped = text.lstrip()
        if not stripped.startswith("/"):
            return None
        word, _, rest = stripped[1:].partition(" ")
        skill = self.skills.get(word.strip())
        return (skill, rest.strip()) if skill else None

    @tool(name="load_skill")
    def load_skill(
        self,
        name: Annotated[
            str, Field(min_length=1, max_length=64, description="A skill name from the catalog.")
        ],
    ) -> str:
        """Load a skill's full instructions when the task matches its condition in the catalog."""
        return self.body(name)

    @tool(name="read_skill_file")
    def read_skill_file(
        self,
        name: Annotated[str, Field(min_length=1, max_length=64, description="The skill's name.")],
        path: Annotated[
            str, Field(min_length=1, max_length=300, description="A path from the skill's file list.")
        ],
    ) -> str:
        """Read one file a loaded skill refers to (a reference document or a script)."""
        return self.read_file(name, path)

    def tools(self) -> list[Tool]:
        return [self.load_skill, self.read_skill_file]


_SUSPICIOUS = (
    "ignore previous",
    "ignore all previous",
    "disregard",
    "system prompt",
    "export_secrets",
    "password",
    "api key",
    "token",
    "credential",
    "curl ",
    "wget ",
    "base64",
    "do not tell",
)


def review_folder(folder: str | Path) -> list[dict[str, Any]]:
    """What a reviewer needs before approving third-party skills: for each skill folder its name,
    description, files and digest (or why it cannot load), and lines worth a closer look (a
    reading aid; approval is the control)."""
    root = Path(folder)
    out: list[dict[str, Any]] = []
    for path in _skill_folders(root):
        entry: dict[str, Any] = {"path": str(path)}
        try:
            skill = load_skill_folder(path, trusted=False)
        except SkillError as err:
            entry["error"] = str(err)
            out.append(entry)
            continue
        flags = []
        for rel in ["SKILL.md", *skill.files]:
            try:
                text = (path / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                flags.append(f"{rel}: not UTF-8 text (binary file)")
                continue
            for n, line in enumerate(text.splitlines(), start=1):
                low = line.lower()
                hits = [w.strip() for w in _SUSPICIOUS if w in low]
                if hits or any(ord(c) in (0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF) for c in line):
                    flags.append(
                        f"{rel}:{n}: {', '.join(hits) or 'invisible characters'}: {line.strip()[:160]}"
                    )
        entry.update(
            name=skill.name,
            description=skill.description,
            files=list(skill.files),
            extra_keys=sorted(skill.meta),
            digest=skill.digest,
            flags=flags,
        )
        out.append(entry)
    return out
