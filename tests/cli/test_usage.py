"""The command line a newcomer meets: usage errors, the version."""

from __future__ import annotations

import json

import pytest

from tether.cli import main


def test_a_mistyped_flag_is_a_usage_error_exit_1_with_the_json_envelope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["run", "Why is 742 open?", "--agnet", "agent.yaml", "--json"])
    out = capsys.readouterr()
    assert code == 1  # 2 is "denied"; nothing ran here
    envelope = json.loads(out.out.strip().splitlines()[-1])
    assert envelope["ok"] is False and envelope["exit"] == 1 and envelope["error"] == "usage"
    assert "--agnet" in envelope["message"] and "usage:" in out.err
    # Without --json: the usage and the reason on stderr, nothing on stdout.
    assert main(["approvals", "list", "--nope"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "--nope" in out.err


def test_the_version_and_a_well_formed_command_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("tether ")
    assert main([]) == 0 and "usage:" in capsys.readouterr().out  # no command: the help
