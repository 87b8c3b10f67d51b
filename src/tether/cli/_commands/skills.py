"""``tether skills review FOLDER``: what a reviewer needs before approving third-party skills."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli._commands._options import add_actions, add_json
from tether.clisupport.output import fail, outcome


def register(sub: Any) -> None:
    _, actions = add_actions(
        sub, "skills", dest="skills_command", help="review agent skills (SKILL.md folders)"
    )
    r = actions.add_parser(
        "review",
        help="show each skill's name, description, files, digest and flagged lines",
        description="Review the skills under FOLDER (a skill folder, or a folder of skill folders). "
        "Approve a third-party skill by passing its digest to SkillLibrary.add_folder(..., approved=...); "
        "any later change to its files changes the digest and refuses it again.",
    )
    r.add_argument("folder", type=Path)
    add_json(r)
    r.set_defaults(handler=review)


def review(args: argparse.Namespace) -> int:
    from tether.context._skills import review_folder

    if not args.folder.is_dir():
        return fail("tether skills review", f"{args.folder} is not a folder", as_json=args.json)
    entries = review_folder(args.folder)
    if args.json:
        return outcome({"folder": str(args.folder), "skills": entries}, None, as_json=True)
    lines: list[str] = []
    for e in entries:
        if "error" in e:
            lines.append(f"{e['path']}: REFUSED: {e['error']}")
            continue
        files, extra = ", ".join(e["files"]) or "-", ", ".join(e["extra_keys"]) or "-"
        lines += [f"{e['name']}  ({e['path']})", f"  description: {e['description']}"]
        lines += [f"  digest: {e['digest']}", f"  files: {files}  extra keys: {extra}"]
        lines += [f"  FLAG {flag}" for flag in e["flags"]]
    # A skill's name and description are its author's words: shown inert (outcome escapes them).
    return outcome({"folder": str(args.folder), "skills": entries}, "\n".join(lines), as_json=False)
