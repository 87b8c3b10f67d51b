"""``FallbackModel``: one ``Model`` over an ordered list of models. When the model in use fails
— its backend raised ``ModelError``: retries spent on 429/5xx/timeouts, or an error no retry
fixes (401, 404, a context it refuses) — the same request goes to the next one, and the rest
of the run stays on it. The answer that comes back says which model gave it and which
failed before (``meta["fallback_from"]``: model, error), so the trace records every switch.

Budgets: the run counts one LLM call per ``complete`` and adds the usage and cost of the
answer that came back, whichever model gave it, and its deadline bounds the whole of it. What
a model that failed was billed for its attempts (``ModelError.usage``, ``cost_usd``) is added
to that answer (``meta["fallback_billed"]``), or handed on with the chain's own ``ModelError``:
tokens paid for before a switch count too; a chain cancelled from outside hands them to the
caller's ``Unsettled`` (``tether.models._retrying``), as a backend does. A final answer that
did not end normally (cut at the token limit, refused) is an answer, not a failure: it is
returned, and the run stops on it honestly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio

from tether.core.messages import Usage
from tether.errors import ConfigError, ModelError
from tether.models._base import Model, ModelRequest, ModelResponse
from tether.models._retrying import unsettled

__all__ = ["FallbackModel"]


class FallbackModel:
    """Try ``models`` in order; stay on the first that answers. ``name`` is the first's."""

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ConfigError("FallbackModel needs at least one model")
        self.models = list(models)
        self.name = self.models[0].name
        self.active = 0  # the model in use: moves forward on failure, never back
        self.switches: list[dict[str, Any]] = []  # every switch taken: from, to, error

    def __repr__(self) -> str:
        return f"FallbackModel({[m.name for m in self.models]!r})"

    @property
    def stream(self) -> bool:
        return bool(getattr(self.models[self.active], "stream", False))

    @property
    def price(self) -> Any:
        """The price of the model in use; None when any model is unpriced (a cost budget
        then cannot be trusted, whichever model the run ends on)."""
        prices = [getattr(m, "price", None) for m in self.models]
        return None if any(p is None for p in prices) else prices[self.active]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The answer of the first model that gives one; raises ``ModelError`` listing every
        model's error when none does."""
        failed: list[dict[str, Any]] = []
        spent, cost = Usage(), 0.0  # what the models that failed were billed
        while True:
            model = self.models[self.active]
            try:
                response = await model.complete(request)
            except anyio.get_cancelled_exc_class():  # cut from outside: what the failed models cost
                taken = [{**r, "model": f["model"]} for f in failed for r in f.get("retries", ())]
                unsettled(spent, cost, taken, failed)
                raise
            except ModelError as err:
                failed.append({**_named(model), "error": str(err)[:500]})
                if err.retries:  # the waits taken on it, traced with the switch
                    failed[-1]["retries"] = err.retries
                if isinstance(err.usage, Usage):
                    spent, cost = spent + err.usage, cost + err.cost_usd
                if self.active + 1 >= len(self.models):
                    usage = spent if spent.total_tokens else None
                    taken = [{**r, "model": f["model"]} for f in failed for r in f.get("retries", ())]
                    raise ModelError(
                        f"every model failed: {_tried(failed)}",
                        usage=usage,
                        cost_usd=cost,
                        retries=taken,
                        fallback_from=[{k: v for k, v in f.items() if k != "retries"} for f in failed],
                    ) from None
                self.active += 1
                # The k-th switch is always from the k-th model (``active`` only moves forward):
                # what the run reports of it reads the model, its provider and key, by that place.
                left = {k: v for k, v in failed[-1].items() if k != "provider"}
                self.switches.append({**left, "to": self.models[self.active].name})
                continue
            if failed:
                response.meta["fallback_from"] = failed
            if spent.total_tokens:
                own = response.usage
                usage = replace(spent + own, extra=dict(own.extra))
                billed = {"prompt_tokens": spent.prompt_tokens, "completion_tokens": spent.completion_tokens}
                meta = {**response.meta, "fallback_billed": {**billed, "cost_usd": cost}}
                response = replace(response, usage=usage, cost_usd=response.cost_usd + cost, meta=meta)
            return response

    async def aclose(self) -> None:
        for model in self.models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()


def _named(model: Model) -> dict[str, Any]:
    """How the trace names a model of the chain: its name, and the provider it speaks to where
    it has one (a chain falls back to the same model name on another provider or endpoint:
    before, both were ``m-1``, and the switch did not say which failed)."""
    named: dict[str, Any] = {"model": model.name}
    provider = getattr(model, "provider", None)
    if isinstance(provider, str):
        named["provider"] = provider
    return named


def _tried(failed: list[dict[str, Any]]) -> str:
    """What each model of a chain met, each named once, after its provider (the same name on
    two providers is told apart): ``openai-chat model m-1: HTTP 503 …`` (before: ``m-1: m-1:
    HTTP 503 …``, which provider unsaid)."""
    said = []
    for f in failed:
        error = f["error"] if f["error"].startswith(f"{f['model']}: ") else f"{f['model']}: {f['error']}"
        said.append(f"{f['provider']} model {error}" if "provider" in f else error)
    return "; ".join(said)
