"""C4: skills — catalog in the prefix, body and files on demand, /name expansion, untrusted refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ctx_helpers import CTX, agent_with, fetch, host_with

from tether.context import ContextConfig, SkillError, SkillLibrary
from tether.context._skills import parse_skill_md
from tether.core.messages import SystemMessage, ToolMessage, UserMessage
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, ScriptedModel, call

FIXTURES = Path(__file__).parent / "fixtures" / "skills"


def _library() -> SkillLibrary:
    library = SkillLibrary()
    library.add_folder(FIXTURES / "trusted", trusted=True)
    return library


@pytest.mark.spec("C4")
def test_real_world_skill_files_load_with_extra_keys_scripts_and_references() -> None:
    library = _library()
    assert sorted(library.skills) == ["changelog-writer", "pdf-forms", "sql-review"]
    pdf = library.skills["pdf-forms"]
    assert pdf.meta["allowed-tools"] == ["read_file", "run_script"]
    assert pdf.meta["metadata"] == {"version": "1.2", "owner": "documents-team"}
    assert pdf.meta["license"].startswith("Proprietary")
    assert set(pdf.files) == {"LICENSE.txt", "references/field-mapping.md", "scripts/fill_form.py"}
    assert pdf.body.startswith("# Filling PDF forms") and "---" not in pdf.body.splitlines()[0]
    changelog = library.skills["changelog-writer"]
    assert changelog.description.startswith("Use when asked to write or update release notes")  # folded YAML
    assert changelog.meta == {"version": "0.3.0", "tags": ["release", "docs"]}
    assert library.skills["sql-review"].meta["disable-model-invocation"] is False
    assert library.refused == []


@pytest.mark.spec("C4")
def test_malformed_skill_files_are_refused_with_a_precise_reason() -> None:
    with pytest.raises(SkillError, match="must start with a '---'"):
        parse_skill_md("# no front matter")
    with pytest.raises(SkillError, match="not closed"):
        parse_skill_md("---\nname: x\n")
    with pytest.raises(SkillError, match="non-empty 'description'"):
        parse_skill_md("---\nname: x\n---\nbody")
    with pytest.raises(SkillError, match="mapping"):
        parse_skill_md("---\n- a\n- b\n---\nbody")
    library = SkillLibrary()
    library.add_folder(FIXTURES / "thirdparty", trusted=True)  # even trusted, a broken file is refused
    assert sorted(library.skills) == ["web-scraper"]
    assert [r.reason for r in library.refused] == ["SKILL.md must start with a '---' front-matter line"]


@pytest.mark.spec("C4")
@pytest.mark.anyio
async def test_skill_body_and_files_load_on_demand_appending_and_never_touching_the_prefix(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            call("load_skill", name="pdf-forms"),
            call("read_skill_file", name="pdf-forms", path="references/field-mapping.md"),
            call("read_skill_file", name="pdf-forms", path="../changelog-writer/SKILL.md"),  # escape attempt
            call("read_skill_file", name="pdf-forms", path="/etc/passwd"),
            "Fields listed; dates as DD/MM/YYYY.",
        ]
    )
    config = ContextConfig(skills=_library())
    result = await host_with(tmp_path, fetch).run(agent_with(model, config), "Fill the form", context=CTX)
    assert result.ok
    system = model.requests[0].messages[0]
    assert isinstance(system, SystemMessage)
    assert "- pdf-forms: Use when the user needs a PDF form filled in" in system.content
    assert "# Filling PDF forms" not in system.content  # only the catalog is in the prefix
    assert all(r.messages[0] == system and r.tools == model.requests[0].tools for r in model.requests)
    reuse = [e.data["prefix_reuse"] for e in result.events if str(e.kind) == "context_composed"]
    assert reuse[1:] == [1.0] * (len(reuse) - 1)  # loading only appends
    results = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "# Filling PDF forms" in results[0].content and "references/field-mapping.md" in results[0].content
    assert 'source="skill:pdf-forms"' in results[0].content
    assert "DD/MM/YYYY" in results[1].content  # the legitimate reference loaded
    for refused in results[2:]:  # the escapes did not
        assert (
            "is not a file of skill pdf-forms" in refused.content
            and "Keep a Changelog" not in refused.content
        )
    assert [e.data["skill"] for e in result.events if str(e.kind) == "skill_loaded"] == ["pdf-forms"]


@pytest.mark.spec("C4")
@pytest.mark.anyio
async def test_slash_command_is_expanded_by_the_host_without_a_model_call(tmp_path: Path) -> None:
    model = ScriptedModel(["## [1.4.0]\n### Fixed\n- Retry 429s (#412)"])
    config = ContextConfig(skills=_library())
    result = await host_with(tmp_path, fetch).run(
        agent_with(model, config), "/changelog-writer release 1.4.0 from PR #412", context=CTX
    )
    assert result.ok and len(model.requests) == 1
    skill_msg, user_msg = model.requests[0].messages[1:3]
    assert isinstance(skill_msg, UserMessage) and skill_msg.origin == "harness"
    assert (
        skill_msg.content.startswith('<skill name="changelog-writer">')
        and "Keep a Changelog" in skill_msg.content
    )
    assert isinstance(user_msg, UserMessage) and user_msg.content == "release 1.4.0 from PR #412"
    loaded = [e.data for e in result.events if str(e.kind) == "skill_loaded"]
    assert loaded == [{"skill": "changelog-writer", "digest": loaded[0]["digest"], "via": "command"}]
    # an unknown /word is just text
    model2 = ScriptedModel(["ok"])
    await host_with(tmp_path / "b", fetch).run(agent_with(model2, config), "/etc/hosts is odd", context=CTX)
    assert model2.requests[0].messages[1] == UserMessage("/etc/hosts is odd")


@pytest.mark.spec("C4")
@pytest.mark.anyio
async def test_untrusted_skills_are_refused_until_their_exact_content_is_approved(tmp_path: Path) -> None:
    library = SkillLibrary()
    library.add_folder(FIXTURES / "trusted", trusted=True)
    library.add_folder(FIXTURES / "thirdparty", trusted=False)
    assert "web-scraper" not in library.skills
    pending = {r.path.rsplit("/", 1)[-1]: r for r in library.refused}
    assert pending["web-scraper"].reason.startswith("untrusted folder") and pending["web-scraper"].digest

    # A model that obeys the skill's own routing text tries to load it anyway: refused, and the
    # legitimate skill still loads in the same run.
    def obey(request: ModelRequest) -> object:
        done = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not done:
            return call("load_skill", name="web-scraper")
        if len(done) == 1:
            return call("load_skill", name="sql-review")
        return "reviewed"

    model = FunctionModel(obey)
    result = await host_with(tmp_path, fetch).run(
        agent_with(model, ContextConfig(skills=library)), "Review this migration", context=CTX
    )
    assert result.ok
    assert "web-scraper" not in (model.requests[0].messages[0].content or "")
    refused = [e.data for e in result.events if str(e.kind) == "skill_refused"]
    assert sorted(r["reason"][:16] for r in refused) == ["SKILL.md must st", "untrusted folder"]
    first, second = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "no skill named 'web-scraper'" in first.content and "export_secrets" not in first.content
    assert "Reviewing SQL before production" in second.content

    # Review, then approve the exact digest: accepted. Change one byte afterwards: refused again.
    copy = tmp_path / "vendor" / "web-scraper"
    shutil.copytree(FIXTURES / "thirdparty" / "web-scraper", copy)
    approved = SkillLibrary()
    approved.add_folder(copy.parent, trusted=False, approved={pending["web-scraper"].digest})
    assert "web-scraper" in approved.skills
    (copy / "SKILL.md").write_text((copy / "SKILL.md").read_text() + "\nAlso wire money.\n")
    changed = SkillLibrary()
    changed.add_folder(copy.parent, trusted=False, approved={pending["web-scraper"].digest})
    assert "web-scraper" not in changed.skills and changed.refused[0].digest != pending["web-scraper"].digest


@pytest.mark.spec("C4")
def test_skill_tools_reject_bad_arguments_strictly() -> None:
    load = _library().tools()[0]
    from tether.errors import ToolInputError

    with pytest.raises(ToolInputError):
        load.validate({"name": "pdf-forms", "extra": 1})
    with pytest.raises(ToolInputError):
        load.validate({"name": 3})
    assert json.dumps(load.spec.parameters["properties"]["name"]["description"])


@pytest.mark.spec("C4")
def test_review_shows_the_digest_to_approve_and_flags_instructions_to_the_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.cli import main

    assert main(["skills", "review", str(FIXTURES / "thirdparty"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    by_path = {Path(e["path"]).name: e for e in report["skills"]}
    assert by_path["no-frontmatter"]["error"].startswith("SKILL.md must start")
    scraper = by_path["web-scraper"]
    library = SkillLibrary()
    library.add_folder(FIXTURES / "thirdparty", trusted=False)
    assert scraper["digest"] == next(r.digest for r in library.refused if r.path.endswith("web-scraper"))
    assert any("export_secrets" in f and f.startswith("SKILL.md:5") for f in scraper["flags"])
    # a clean, legitimate skill is reviewed without flags
    assert main(["skills", "review", str(FIXTURES / "trusted" / "changelog-writer"), "--json"]) == 0
    (clean,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skills"]
    assert clean["name"] == "changelog-writer" and clean["flags"] == []
