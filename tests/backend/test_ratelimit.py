"""One shared token bucket per upstream, across concurrent model calls and parallel tool calls (SPEC L4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest
from backend_support import CONTEXT, Sleeps, make_host

from tether import Agent
from tether.core.messages import UserMessage
from tether.core.ratelimit import TokenBucket, shared_bucket
from tether.models._base import ModelRequest
from tether.models._openai import OpenAICompatible
from tether.testing import ScriptedModel, call
from tether_testing.fake_server import FakeChatServer, Reply

pytestmark = pytest.mark.anyio

Serve = Callable[[Sequence[Reply]], FakeChatServer]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.spec("L4")
async def test_concurrent_callers_are_spaced_in_arrival_order() -> None:
    sleeps = Sleeps()
    bucket = TokenBucket(rate=1.0, burst=2, clock=Clock(), sleep=sleeps)
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(bucket.acquire)
    assert sorted(sleeps.waits) == [1.0, 2.0, 3.0]  # two from the burst, then one a second
    assert bucket.acquired == 5 and bucket.waited == 3


async def test_tokens_refill_with_time_up_to_the_burst() -> None:
    clock, sleeps = Clock(), Sleeps()
    bucket = TokenBucket(rate=2.0, burst=2, clock=clock, sleep=sleeps)
    assert [await bucket.acquire() for _ in range(2)] == [0.0, 0.0]
    clock.now += 10  # long idle: refills to the burst, not to 20 tokens
    assert [await bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.5]


async def test_a_cancelled_wait_gives_its_token_back() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=1, clock=clock)
    await bucket.acquire()
    with anyio.move_on_after(0.01):
        await bucket.acquire()  # would wait 1 s (real sleep), cancelled
    sleeps = Sleeps()
    bucket._sleep = sleeps
    await bucket.acquire()
    assert sleeps.waits == [1.0]  # not 2.0: the cancelled reservation was refunded


def test_one_bucket_per_upstream_key_and_conflicting_rates_are_refused() -> None:
    a = shared_bucket("test:upstream-a", 4, 4)
    assert shared_bucket("test:upstream-a", 4, 4) is a
    assert shared_bucket("test:upstream-b", 4, 4) is not a
    with pytest.raises(ValueError, match="already limited at 4/s"):
        shared_bucket("test:upstream-a", 10, 4)
    with pytest.raises(ValueError):
        TokenBucket(rate=0)


@pytest.mark.spec("L4")
async def test_backends_sharing_a_bucket_draw_from_one_budget(serve: Serve) -> None:
    server = serve([Reply.text("a"), Reply.text("b"), Reply.text("c"), Reply.text("d")])
    sleeps = Sleeps()
    bucket = TokenBucket(rate=1.0, burst=1, clock=Clock(), sleep=sleeps)
    first = OpenAICompatible("fake-model", base_url=server.url, rate_limit=bucket)
    second = OpenAICompatible("fake-model", base_url=server.url, rate_limit=bucket)
    request = ModelRequest(messages=(UserMessage("hi"),))
    texts: list[str | None] = []

    async def ask(model: OpenAICompatible) -> None:
        texts.append((await model.complete(request)).message.content)

    async with anyio.create_task_group() as tg:
        for model in (first, second, first, second):
            tg.start_soon(ask, model)
    await first.aclose()
    await second.aclose()
    assert sorted(texts) == ["a", "b", "c", "d"]  # type: ignore[type-var]
    assert sorted(sleeps.waits) == [1.0, 2.0, 3.0]
    assert bucket.acquired == 4


@pytest.mark.spec("L4")
async def test_parallel_tool_calls_to_one_upstream_share_the_hosts_bucket(tmp_path: Path) -> None:
    sleeps = Sleeps()
    bucket = TokenBucket(rate=1.0, burst=1, clock=Clock(), sleep=sleeps)
    host = make_host(tmp_path, rate_limits={"read_order": bucket})
    turn = [call("read_order", order_id=str(n)) for n in (742, 743, 744)] + [
        call("read_history", order_id="742")
    ]
    agent = Agent(instructions="i", model=ScriptedModel([turn, "done"]))
    result = await host.run(agent, "q", context=CONTEXT)

    assert result.ok
    assert [c.status for c in result.calls] == ["ok"] * 4  # every call ran, none was dropped
    assert bucket.acquired == 3  # read_history is another upstream: not limited by this bucket
    assert sorted(sleeps.waits) == [1.0, 2.0]
