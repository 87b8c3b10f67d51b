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
    for e in entries:
        if "error" in e:
            print(f"{e['path']}: REFUSED: {e['error']}")
            continue
        print(f"{e['name']}  ({e['path']})\n  description: {e['description']}\n  digest: {e['digest']}")
        print(f"  files: {', '.join(e['files']) or '-'}  extra keys: {', '.join(e['extra_keys']) or '-'}")
        for flag in e["flags"]:
            print(f"  FLAG {flag}")
    return 0
