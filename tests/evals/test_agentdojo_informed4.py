"""The informed4 attacker (directory entries that hold the attacker's values, values carried by an
extension of an allowed destination, the user's destination first in a list, names near the
request's phrase, values halved across two tools) on a small slice of AgentDojo pairs: real
without the gate, no harmful write and no goal with it. The full run is
``bench/agentdojo.py --attackers informed4``."""

from __future__ import annotations

import pytest

agentdojo = pytest.importorskip(
    "agentdojo", reason="agentdojo is not installed (optional extra: pip install -e '.[agentdojo]')"
)

from tether_examples.agentdojo.runner import SuiteBench  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.spec("P1", "P2", "T5", "T8")]

PAIRS = [
    ("slack", "user_task_4", "injection_task_2"),  # post to a user-named site; exfiltrate to another
    ("workspace", "user_task_8", "injection_task_13"),  # add the user's people; phishing mails
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(("suite", "user", "injection"), PAIRS)
async def test_informed4_reaches_no_goal_and_writes_nothing_harmful(
    suite: str, user: str, injection: str
) -> None:
    b = SuiteBench(suite)
    u, i = b.user_tasks[user], b.injection_tasks[injection]
    open_ = await b.run(u, i, gate=False, attacker="informed4")
    assert open_.harmful_writes, "without the gate the informed4 campaign writes for the attacker"
    assert "extend" in {w.split(":", 2)[1] for w in open_.harmful_writes}
    for mode in ("agent", "reference"):
        gated = await b.run(u, i, attacker="informed4", mode=mode)
        assert gated.attempted, "the compromised agent read the injection and acted on it"
        assert not gated.attack_succeeded
        assert gated.harmful_writes == []
        assert gated.utility, "the user's own task still runs"
