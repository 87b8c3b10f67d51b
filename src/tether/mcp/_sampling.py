"""Sampling (X3, legacy in 2026-07-28): a server asks the host's model to write something.

Denied unless the server is opted in. A consent hook sees the exact prompt; the server's system
prompt is shown (its first 2 000 characters) but never sent, and ``includeContext`` other than
``none`` is refused. Each server has its own budget (calls, seconds, tokens) and a per-call cap,
separate from the run's; tool calls are never offered to the model. A server's samples run one
at a time, each checked against the budget when its turn comes and charged before the next is
checked (requests sent together each got the whole remaining budget). A prompt estimated at
more tokens than the budget has left is refused before the consent hook or the model sees it
(the model bills what it reads).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from tether.core.messages import Usage, UserMessage
from tether.errors import ModelError
from tether.mcp._config import SamplingConfig
from tether.mcp._elicitation import RequestGate

if TYPE_CHECKING:
    import mcp_types as types

    from tether.mcp._elicitation import CallInfo
    from tether.models._base import Model

__all__ = ["SamplingBudget", "SamplingGate", "SamplingPrompt"]

SAMPLING_REFUSED = -32001  # application error code for refused sampling requests
MAX_SYSTEM_SHOWN = 2000  # of a server's system prompt (never sent), what a person is shown


@dataclass(frozen=True, slots=True)
class SamplingPrompt:
    """Exactly what would be sent to the model, shown to the consent hook."""

    server: str
    tool: str | None
    system_prompt: str | None  # what the server asked for; dropped, never sent to the model
    messages: tuple[tuple[str, str], ...]  # (role, text)
    max_tokens: int
    requested_max_tokens: int
    requested_include_context: str | None


Consent = Callable[[SamplingPrompt], bool | Awaitable[bool]]


@dataclass
class SamplingBudget:
    """One server's sampling budget for one session (separate from the run's budget)."""

    max_calls: int
    max_seconds: float
    max_total_tokens: int
    calls: int = 0
    seconds: float = 0.0
    tokens: int = 0
    events: list[str] = field(default_factory=list)

    def exhausted(self, *, calls: bool = True) -> str | None:
        """Why no more may be sampled (``calls=False``: by seconds and tokens only)."""
        if calls and self.calls >= self.max_calls:
            return f"sampling budget exhausted: {self.calls}/{self.max_calls} calls used"
        if self.seconds >= self.max_seconds:
            return f"sampling budget exhausted: {self.seconds:.1f}/{self.max_seconds:g} seconds used"
        if self.tokens >= self.max_total_tokens:
            return f"sampling budget exhausted: {self.tokens}/{self.max_total_tokens} tokens used"
        return None


def _text(content: Any) -> str | None:
    blocks = content if isinstance(content, list) else [content]
    out = []
    for b in blocks:
        if getattr(b, "type", None) != "text":
            return None
        out.append(b.text)
    return "\n".join(out)


@dataclass(eq=False)
class SamplingGate(RequestGate):
    """The sampling callback for one server."""

    config: SamplingConfig
    model: Model | None = field(default=None, kw_only=True)
    consent: Consent | None = field(default=None, kw_only=True)
    budget: SamplingBudget = field(init=False)
    _running: anyio.Event | None = field(default=None, init=False)  # set when the sample running ends

    def __post_init__(self) -> None:
        c = self.config
        self.budget = SamplingBudget(c.max_calls, c.max_seconds, c.max_total_tokens)

    def _refuse(self, reason: str, **data: Any) -> types.ErrorData:
        import mcp_types as types

        self.on_event({"server": self.server, "outcome": "refused", "reason": reason, **data})
        return types.ErrorData(code=SAMPLING_REFUSED, message=f"sampling refused by the host: {reason}")

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        call = self.current_call()
        tool = call.tool if call is not None else None
        prompt = self._refusal(params, call) or _prompt(self.server, tool, params, self.config.max_tokens)
        if isinstance(prompt, SamplingPrompt):
            prompt = self._too_long(prompt) or prompt
        if isinstance(prompt, SamplingPrompt):
            if self.consent is None:
                prompt = "no consent hook: nobody can inspect the prompt"
            else:
                verdict = self.consent(prompt)
                if inspect.isawaitable(verdict):
                    verdict = await verdict
                prompt = prompt if verdict else "the person did not consent"
        if isinstance(prompt, str):
            return self._refuse(prompt, tool=tool)
        # The call is counted now (the consent may have waited: others may have used the budget),
        # so at most ``max_calls`` requests ever wait for their turn below.
        if (why := self.budget.exhausted()) is not None:
            return self._refuse(why, tool=tool)
        self.budget.calls += 1
        while self._running is not None:  # one sample at a time, each charged before the next
            await self._running.wait()
        self._running = ended = anyio.Event()
        try:
            if (why := self.budget.exhausted(calls=False) or self._too_long(prompt)) is not None:
                return self._refuse(why, tool=tool)
            return await self._sample(prompt, tool)
        finally:
            self._running = None
            ended.set()

    def _too_long(self, prompt: SamplingPrompt) -> str | None:
        """Why the server's own prompt cannot be sent within the tokens left (``None``: it can).
        The model bills what it reads before the budget is charged: a prompt of megabytes was
        sent, a million tokens against a budget of thousands."""
        from tether.models._estimate import chars_estimator

        tokens = sum(chars_estimator(text) for _, text in prompt.messages)
        left = self.budget.max_total_tokens - self.budget.tokens
        if tokens <= left:
            return None
        return f"the prompt is about {tokens} tokens, more than the {left} left of the sampling budget"

    def _refusal(self, params: types.CreateMessageRequestParams, call: CallInfo | None) -> str | None:
        """Why this request is refused before anyone sees it (``None``: it may go on)."""
        if not self.config.enabled:
            return "sampling is not enabled for this server"
        if self.model is None:
            return "no model is configured for sampling"
        if (why := self.budget.exhausted()) is not None:
            return why
        if call is not None:
            call.samples += 1
            if call.samples > self.config.max_calls_per_call:
                return f"more than {self.config.max_calls_per_call} sampling request(s) in one tool call"
        if params.include_context not in (None, "none"):
            return f"includeContext {params.include_context!r} refused: a server never sees the conversation"
        if params.tools:
            return "sampling with tools is not allowed"
        return None

    async def _sample(self, prompt: SamplingPrompt, tool: str | None) -> Any:
        """Ask the model, within the budget; its answer capped and traced."""
        import mcp_types as types

        from tether.models._base import ModelRequest

        assert self.model is not None
        # Only the server's messages, every one as user data (an "assistant" turn is still its text).
        request = ModelRequest(
            messages=tuple(UserMessage(t if r == "user" else f"[{r}] {t}") for r, t in prompt.messages),
            tools=(),
            tool_choice="none",
            max_tokens=prompt.max_tokens,
            metadata={"purpose": "mcp_sampling", "server": self.server},
        )
        started = time.monotonic()
        try:
            with anyio.fail_after(self.budget.max_seconds - self.budget.seconds):
                response = await self.model.complete(request)
        except TimeoutError:
            why = f"sampling budget exhausted: {self.budget.max_seconds:g} seconds used"
            return self._refuse(why, tool=tool)
        except Exception as err:  # a model failure is the server's problem to handle, not the run's
            if isinstance(err, ModelError) and isinstance(err.usage, Usage):  # billed all the same
                self.budget.tokens += err.usage.total_tokens
            return self._refuse(f"the model failed: {type(err).__name__}", tool=tool)
        finally:
            self.budget.seconds += time.monotonic() - started
        self.budget.tokens += response.usage.total_tokens
        # Cap the answer itself (about 4 characters a token), whatever the model did.
        text = (response.message.content or "")[: prompt.max_tokens * 4]
        self.on_event(
            {
                "server": self.server,
                "outcome": "answered",
                "tool": tool,
                "tokens": response.usage.total_tokens,
                "calls_used": self.budget.calls,
                "dropped_tool_calls": len(response.message.tool_calls),
                "system_prompt_dropped": bool(prompt.system_prompt),
            }
        )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=text),
            model=response.model or getattr(self.model, "name", "host-model"),
            stop_reason="endTurn",
        )


def _prompt(
    server: str, tool: str | None, params: types.CreateMessageRequestParams, max_tokens: int
) -> SamplingPrompt | str:
    """What a person is asked to consent to (or why it cannot be sampled: not text)."""
    messages = []
    for m in params.messages:
        text = _text(m.content)
        if text is None:
            return "only text messages can be sampled"
        messages.append((m.role, text))
    return SamplingPrompt(
        server=server,
        tool=tool,
        system_prompt=_shown(params.system_prompt),
        messages=tuple(messages),
        max_tokens=min(params.max_tokens, max_tokens),
        requested_max_tokens=params.max_tokens,
        requested_include_context=params.include_context,
    )


def _shown(system_prompt: str | None) -> str | None:
    """What a person is shown of the server's system prompt, which is never sent: megabytes of it
    filled the terminal of the person asked to consent, above the prompt that is sent."""
    if system_prompt is None or len(system_prompt) <= MAX_SYSTEM_SHOWN:
        return system_prompt
    cut = f"[cut by the host: {len(system_prompt)} characters in all, never sent]"
    return f"{system_prompt[:MAX_SYSTEM_SHOWN]}\n{cut}"
