"""The models of an agent file (``tether.agents._build``): each provider's backend, scripted
stand-ins, fallbacks, and what a run needs of them checked before it starts (``tether agent check``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.agents._file import AgentFile
from tether.agents._spec import SCRIPTED, BackendSpec, ModelSpec
from tether.errors import ConfigError

__all__ = ["backend_class", "check_models", "make_model", "model_for", "scripted_model"]


def make_model(af: AgentFile, *, on_delta: Callable[[str, str], None] | None = None) -> Any:
    """The agent's model: a backend for its provider (``OpenAICompatible``, ``OpenAIResponses``,
    ``AnthropicMessages``) or a scripted stand-in named as one; with ``model.fallback``, a
    ``FallbackModel`` over it and its fallbacks. Raises ``ConfigError``."""
    m = af.spec.model
    prices = check_models(af, scripts=False)
    models = []
    for i, spec in enumerate(m.backends()):
        try:
            models.append(_backend(af, spec, prices, on_delta))
        except ConfigError as err:  # a key not set, …: which model of the file
            raise ConfigError(f"{af.label()}: {_field(i)} ({spec.name}): {err}") from None
    if len(models) == 1:
        return models[0]
    from tether.models._fallback import FallbackModel

    return FallbackModel(models)


def check_models(af: AgentFile, *, scripts: bool = True, absent: list[str] | None = None) -> dict[str, Any]:
    """What a run's models need of the file alone, checked as a run checks it (``tether agent
    check``; ``make_model`` with ``scripts=False``, as it reads them itself): a price for each model
    a cost budget counts, a thinking budget under its output cap, and each scripted stand-in's
    script read and parsed. What the shell lacks — a script not there yet, a key not set for the
    provider's own host — is noted in ``absent`` when given (a run still refuses it). Returns the
    price table. Raises ``ConfigError``."""
    from tether.models._pricing import price_for

    m = af.spec.model
    prices = _prices(m)
    for i, sub in enumerate(af.spec.context.subagents):
        if sub.model is not None and (why := _thinking_unfit(sub.model)) is not None:
            raise ConfigError(f"{af.label()}: context.subagents[{i}].model: {why}")
    for i, spec in enumerate(m.backends()):
        for budget in ("max_cost_usd", "max_cost_usd_hard"):
            if (
                getattr(m.limits, budget) is not None
                and spec.scripted is None
                and price_for(spec.name, prices) is None
            ):
                raise ConfigError(
                    f"{af.label()}: model.limits.{budget} needs a price for {spec.name}: add model.prices"
                )
        if (why := _thinking_unfit(spec)) is not None:
            raise ConfigError(f"{af.label()}: {_field(i)}: {why}")
        if spec.scripted is None and absent is not None:
            from tether.models._backend import key_missing

            if (
                why := key_missing(backend_class(spec.provider), spec.api_key_env, spec.base_url)
            ) is not None:
                absent.append(f"{_field(i)} ({spec.name}): {why}: a run refuses the file until it is set")
        if spec.scripted is None or not scripts:
            continue
        path = af.resolve(spec.scripted)
        if absent is not None and path not in af.files and not path.exists():
            absent.append(f"model script {path} does not exist yet: a run refuses the file until it does")
            continue
        scripted_model(path, label=spec.name, raw=af.files.get(path))
    return prices


def _thinking_unfit(spec: BackendSpec) -> str | None:
    """Anthropic's thinking counts in each response's ``max_tokens`` and takes no temperature but
    1: a cap at or under the budget turns thinking off on every turn, without a word, and another
    temperature is answered 400 on every call."""
    budget, cap = spec.thinking_budget, spec.max_output_tokens
    if budget is None:
        return None
    if cap is not None and cap <= budget:
        return f"max_output_tokens ({cap}) must be above thinking_budget ({budget}): it includes the budget"
    if spec.temperature is not None and spec.temperature != 1:
        return f"temperature {spec.temperature} with thinking_budget: the API takes only 1 (or leave it out)"
    return None


def _field(i: int) -> str:
    """The field of the file's ``i``-th model (``ModelSpec.backends``)."""
    return "model" if i == 0 else f"model.fallback[{i - 1}]"


def _prices(m: ModelSpec) -> dict[str, Any]:
    from tether.models._pricing import DEFAULT_PRICES, Price

    own = {k: Price(p.input, p.output, p.cached_input, p.cache_write) for k, p in m.prices.items()}
    return {**DEFAULT_PRICES, **own}


def _backend(
    af: AgentFile, spec: BackendSpec, prices: Mapping[str, Any], on_delta: Callable[[str, str], None] | None
) -> Any:
    if (script := spec.scripted) is not None:
        obey = isinstance(spec, ModelSpec) and spec.obey_injected
        path = af.resolve(script)
        return scripted_model(path, label=spec.name, obey=obey, raw=af.files.get(path))
    from tether.models._retrying import RetryPolicy

    bucket = None
    if spec.rate is not None:
        from tether.core.ratelimit import shared_bucket

        bucket = shared_bucket(f"model:{spec.base_url or spec.provider}", spec.rate, max(1.0, spec.rate))
    extra = {**spec.extra_body, **({"temperature": spec.temperature} if spec.temperature is not None else {})}
    common: dict[str, Any] = {
        "base_url": spec.base_url,
        "api_key_env": spec.key_env,
        # Whole responses unless the file asks for a stream: every OpenAI-compatible server answers
        # them, while some (llama.cpp's Python server) cannot stream tool calls at all.
        "stream": bool(spec.streaming),
        "timeout_s": spec.timeout_s,
        "retry": RetryPolicy(max_retries=spec.max_retries),
        "prices": prices,
        "rate_limit": bucket,
        "on_delta": on_delta,
        "max_tokens": spec.max_output_tokens,
        "extra_body": extra,
    }
    if spec.transport is not None:
        common["transport"] = spec.transport
    owns: dict[str, dict[str, Any]] = {
        "anthropic": {"thinking_budget": spec.thinking_budget},
        "openai-responses": {
            "reasoning": {"effort": spec.reasoning_effort} if spec.reasoning_effort else None
        },
        "openai-chat": {"reasoning": spec.reasoning},
    }
    return backend_class(spec.provider)(spec.name, **owns[spec.provider], **common)


def backend_class(provider: str) -> Any:
    """The backend class of a provider, imported on first use."""
    module, name = _BACKENDS[provider]
    return getattr(importlib.import_module(module), name)


_BACKENDS = {
    "anthropic": ("tether.models._anthropic", "AnthropicMessages"),
    "openai-responses": ("tether.models._responses", "OpenAIResponses"),
    "openai-chat": ("tether.models._openai", "OpenAICompatible"),
}


def scripted_model(
    path: Path, *, label: str | None = None, obey: bool = False, raw: bytes | None = None
) -> Any:
    """A scripted stand-in (a test double) from a YAML/JSON list of ``{call, arguments}`` /
    ``[...]`` / ``{final}`` steps; ``raw``: the file's bytes, read before."""
    from tether.mcphost._runner import ScriptStep, StandIn
    from tether.testing import FunctionModel

    try:
        steps = [ScriptStep.parse(item) for item in ScriptStep.read(path, raw)]
    except ValueError as err:
        raise ConfigError(f"model script: {err}") from None
    return FunctionModel(StandIn(steps, obey=obey), name=label or f"{SCRIPTED}{path}")


def model_for(af: AgentFile, spec: BackendSpec, where: str) -> Any:
    """One model of the file other than its own (a subagent's, at field ``where``), priced by the
    file's table. Raises ``ConfigError`` naming the field."""
    if (why := _thinking_unfit(spec)) is not None:
        raise ConfigError(f"{af.label()}: {where}: {why}")
    try:
        return _backend(af, spec, _prices(af.spec.model), None)
    except ConfigError as err:
        raise ConfigError(f"{af.label()}: {where} ({spec.name}): {err}") from None
