"""The elicitation and sampling gates alone, with the SDK's request types (no server needed)."""

from __future__ import annotations

import mcp_types as types
import pytest

from tether.core.messages import AssistantMessage, Usage
from tether.mcp._config import ElicitationConfig, SamplingConfig
from tether.mcp._elicitation import ConsoleResponder, ElicitationGate
from tether.mcp._sampling import SamplingGate
from tether.models._base import ModelRequest, ModelResponse

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _form(message: str = "How many?") -> types.ElicitRequestFormParams:
    return types.ElicitRequestFormParams(message=message, requested_schema=SCHEMA)


@pytest.mark.spec("X5")
async def test_the_console_person_sees_the_server_and_answers_are_checked() -> None:
    typed = iter(["not json", '{"n": "3"}', '{"n": 3}', "decline", "yes"])
    shown: list[str] = []
    person = ConsoleResponder(read=lambda _prompt: next(typed), write=shown.append)
    events: list[dict] = []
    gate = ElicitationGate(
        "erp", ElicitationConfig(enabled=True, url_mode=True), responder=person, on_event=events.append
    )
    first = await gate(None, _form())
    assert first.action == "accept" and first.content == {"n": 3}  # two bad answers were asked again
    assert shown[0].startswith("MCP server 'erp' asks:") and any("Answer rejected" in s for s in shown)
    assert (await gate(None, _form())).action == "decline"
    url = types.ElicitRequestURLParams(
        message="Sign in", url="https://id.example.org/a?b=c", elicitation_id="e"
    )
    assert (await gate(None, url)).action == "accept"
    assert "domain: id.example.org" in shown[-1] and "https://id.example.org/a?b=c" in shown[-1]
    off = ElicitationGate("erp", ElicitationConfig(enabled=False), responder=person, on_event=events.append)
    assert (await off(None, _form())).action == "decline"
    assert events[-1]["reason"] == "elicitation not enabled for this server"


class _Model:
    name = "m"

    def __init__(self, tokens: int = 10, fail: bool = False) -> None:
        self.tokens, self.fail, self.requests = tokens, fail, []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if self.fail:
            raise RuntimeError("backend down")
        return ModelResponse(AssistantMessage(content="x" * 1000), Usage(self.tokens, self.tokens), "m")


def _sample(text: str = "hi", **kw: object) -> types.CreateMessageRequestParams:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.CreateMessageRequestParams(messages=[message], max_tokens=50, **kw)  # type: ignore[arg-type]


@pytest.mark.spec("X3")
async def test_sampling_budget_consent_and_failures_are_errors_to_the_server() -> None:
    model = _Model(tokens=30)
    gate = SamplingGate("s", SamplingConfig(enabled=True, max_calls=10, max_total_tokens=100, max_tokens=20),
                        model=model, consent=lambda p: True)  # fmt: skip
    ok = await gate(None, _sample())
    assert isinstance(ok, types.CreateMessageResult) and len(ok.content.text) == 80  # capped: 20 tokens
    assert model.requests[0].max_tokens == 20 and model.requests[0].tools == ()
    await gate(None, _sample())
    refused = await gate(None, _sample())  # 2 × 60 tokens used ≥ 100
    assert isinstance(refused, types.ErrorData) and "120/100 tokens" in refused.message
    tool = types.Tool(name="t", input_schema={"type": "object"})
    with_tools = await SamplingGate("s", SamplingConfig(enabled=True), model=model, consent=lambda p: True)(
        None, _sample(tools=[tool])
    )
    assert isinstance(with_tools, types.ErrorData) and "tools" in with_tools.message
    no = await SamplingGate("s", SamplingConfig(enabled=True), model=model, consent=lambda p: False)(
        None, _sample()
    )
    assert isinstance(no, types.ErrorData) and "did not consent" in no.message
    nobody = await SamplingGate("s", SamplingConfig(enabled=True), model=model)(None, _sample())
    assert isinstance(nobody, types.ErrorData) and "no consent hook" in nobody.message
    broken = SamplingGate("s", SamplingConfig(enabled=True), model=_Model(fail=True), consent=lambda p: True)
    failed = await broken(None, _sample())
    assert isinstance(failed, types.ErrorData) and "RuntimeError" in failed.message


@pytest.mark.spec("X5")
def test_what_a_person_reads_cannot_be_rewritten_by_control_characters() -> None:
    from tether.mcp._elicitation import ElicitationPrompt

    form = ElicitationPrompt("s", None, "form", "Proceed?\x1b[2J\rAPPROVED BY ADMIN\u202e", SCHEMA)
    text = form.render()
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert "Proceed?\\x1b[2J\\x0dAPPROVED BY ADMIN\\u202e" in text  # still readable, visibly escaped
    url = ElicitationPrompt(
        "s", None, "url", "Sign in", url="https://exаmple.com/login", domain="exаmple.com"
    )
    assert "domain as registered (IDNA): xn--exmple-4nf.com" in url.render()  # a Cyrillic 'а'
