"""Tool contracts from typed Python functions: typed arguments each with a description (the
JSON Schema the model reads), a declared effect, limits and distinct error types. Identity and
tenant come from the host through a ``ToolContext`` parameter, never from the model."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import UnionType
from typing import (
    Annotated,
    Any,
    Concatenate,
    Generic,
    Protocol,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from typing_extensions import ParamSpec, TypeVar, Unpack

from tether.core._problems import validation_problems
from tether.core._schema import UnusableSchema, check_arguments, compile_schema
from tether.core.stop import cancel_after
from tether.core.types import Effect, Target, ToolContext, ToolOutput, ToolSpec
from tether.errors import PolicyError, ToolError, ToolInputError
from tether.tools._docstring import split_docstring
from tether.tools._received import as_data
from tether.tools._threads import TimedOut, run_in_thread

__all__ = [
    "Effect",
    "Target",
    "Tool",
    "ToolContext",
    "ToolOptions",
    "ToolOutput",
    "ToolSpec",
    "render_result",
    "tool",
    "unwrap_exception_group",
]


# ``Tool[P, T]`` keeps its function's signature for the type checker: parameters ``P``, awaited
# result ``T``. A bare ``Tool`` is ``Tool[..., Any]``.
P = ParamSpec("P", default=...)
T = TypeVar("T", default=Any)
_Q = ParamSpec("_Q")
_U = TypeVar("_U")


class ToolOptions(TypedDict, total=False):
    """The contract options of ``@tool(...)`` and ``Tool.with_options``."""

    name: str | None
    description: str | None
    effect: Effect
    target: Target | None
    egress_argument: str | Sequence[str] | None
    timeout_s: float
    max_result_chars: int
    idempotent: bool
    needs_approval: bool | None
    blocking: bool
    secret_arguments: Iterable[str]


_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(ToolSpec))
_ARGUMENTS_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # built once, not per call
_REQUIRED = object()


def _plain_fields(model: type[BaseModel]) -> tuple[tuple[str, type, bool, Any], ...] | None:
    """``(name, type, may_be_none, default)`` per field when every field is a bare ``str``, ``int``,
    ``bool`` or ``float`` (or that ``| None``) with no constraint or default factory: then the JSON
    values are the arguments and ``Tool.build`` skips pydantic. ``None`` otherwise."""
    fields: list[tuple[str, type, bool, Any]] = []
    for name, info in model.model_fields.items():
        kind: Any = info.annotation
        optional = False
        args = get_args(kind)
        if get_origin(kind) in (Union, UnionType) and len(args) == 2 and type(None) in args:
            kind, optional = next(a for a in args if a is not type(None)), True
        if kind not in (str, int, bool, float) or info.metadata or info.default_factory is not None:
            return None
        default = _REQUIRED if info.is_required() else info.default
        if default is not _REQUIRED and not (default is None or type(default) in (str, int, bool, float)):
            return None
        fields.append((name, kind, optional, default))
    return tuple(fields)


def render_result(value: Any) -> str:
    """Structured results become canonical JSON; text stays text. A dataclass is its fields, an
    enum its value, a set its sorted items, a pydantic model its JSON dump (at any depth), as
    other frameworks send them; what JSON cannot hold otherwise is its ``str``."""
    return _rendered(value)[0]


def _rendered(value: Any) -> tuple[str, Any]:
    """``(text, data)`` of a tool's result: ``render_result``'s text, and ``value`` itself — or,
    where JSON could not hold it as it is (keys that are not text or that do not sort together,
    ``{1: …, "total": …}``, a tuple key, a container that holds itself), the JSON-safe form the
    text was written from, so that nothing after the tool (cleaning, the ledger, the trace) meets
    what the tool's own return could not be written as."""
    if isinstance(value, str):
        return value, value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=_jsonable), value
    except (TypeError, ValueError, RecursionError):
        pass  # a key JSON cannot write or sort, or a cycle: written from its safe form below
    safe = _json_safe(value, ())
    return json.dumps(safe, ensure_ascii=False, sort_keys=True, default=_jsonable), safe


def _json_safe(value: Any, path: tuple[int, ...]) -> Any:
    """``value`` with every mapping's keys as JSON writes them (``1`` → ``"1"``, ``True`` →
    ``"true"``, a tuple or other key → its ``str``), dataclasses, enums and sets as ``_jsonable``
    gives them, and a container met again inside itself as ``"{...}"``/``"[...]"`` (as ``repr``)."""
    if isinstance(value, BaseModel | enum.Enum | set | frozenset) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        value = _jsonable(value)
    if not isinstance(value, dict | list | tuple):
        return value
    if id(value) in path:
        return "{...}" if isinstance(value, dict) else "[...]"
    inner = (*path, id(value))
    if isinstance(value, dict):
        return {_json_key(k): _json_safe(v, inner) for k, v in value.items()}
    return [_json_safe(item, inner) for item in value]


def _json_key(key: Any) -> str:
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)  # as json.dumps writes a key: 1 -> "1", True -> "true", None -> "null"
    return str(key)


def _jsonable(value: Any) -> Any:
    """What ``json.dumps`` writes for a value it cannot write itself (it asks again for the parts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=lambda item: json.dumps(item, sort_keys=True, default=str))
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def unwrap_exception_group(exc: BaseException) -> BaseException:
    """The error that classifies a failure from a TaskGroup: a programming error anywhere in the
    group wins over tool errors (it must end the run loudly); else the first tool error."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = _leaves(exc)
    return next((leaf for leaf in leaves if not isinstance(leaf, ToolError)), leaves[0])


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _arguments_model(
    function: Callable[..., Any],
    tool_name: str,
    params: list[inspect.Parameter],
    documented: dict[str, str] | None = None,
) -> tuple[type[BaseModel], str | None]:
    """The strict pydantic model of a tool's arguments, and the name of its ``ToolContext``
    parameter (never in the schema). An argument with no ``Field`` description takes the one
    its docstring gives (``documented``). Raises ``TypeError``."""
    hints = _hints(function, tool_name, [p.name for p in params])
    documented = documented or {}
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for p in params:
        annotation = hints.get(p.name, Any)
        if annotation is ToolContext:
            context_param = p.name
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {function.__name__}: *args/**kwargs are not allowed in a contract")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    config = ConfigDict(strict=True, extra="forbid")
    model: type[BaseModel] = create_model(f"{tool_name}_arguments", __config__=config, **fields)
    undescribed = [
        n for n, f in model.model_fields.items() if not isinstance(f, FieldInfo) or not f.description
    ]
    if documented and undescribed:
        for name in undescribed:
            if name in documented:
                annotation, default = fields[name]
                fields[name] = (Annotated[annotation, Field(description=documented[name])], default)
        model = create_model(f"{tool_name}_arguments", __config__=config, **fields)
    for fname, finfo in model.model_fields.items():
        if not isinstance(finfo, FieldInfo) or not finfo.description:
            raise TypeError(
                f"tool {tool_name}: argument {fname!r} has no description (use "
                "Annotated[T, Field(description=...)], or describe it in the docstring's Args: "
                "section): the schema is what the model reads"
            )
    return model, context_param


def _hints(function: Callable[..., Any], tool_name: str, names: list[str]) -> dict[str, Any]:
    """The type hints of the arguments ``names``. The return annotation is not needed, so one that
    does not resolve (a class local to a function, under ``from __future__ import annotations``) is
    no error; an argument's that does not is a ``TypeError`` naming it."""
    try:
        return get_type_hints(function, include_extras=True)
    except NameError:
        pass
    raw = getattr(inspect.unwrap(function), "__annotations__", {})
    out: dict[str, Any] = {}
    for name in (n for n in names if n in raw):
        only = type("_Annotations", (), {"__annotations__": {name: raw[name]}})
        try:
            out |= get_type_hints(
                only, globalns=getattr(inspect.unwrap(function), "__globals__", {}), include_extras=True
            )
        except NameError as err:
            raise TypeError(
                f"tool {tool_name}: the type of argument {name!r} ({raw[name]!r}) does not resolve: "
                f"{err} (define or import it at module level, not under TYPE_CHECKING or in a function)"
            ) from None
    return out


def _argument_schema(model: type[BaseModel], tool_name: str, secret: tuple[str, ...]) -> dict[str, Any]:
    """The JSON Schema the model reads: closed, untitled, secret arguments ``writeOnly``, and
    checked by the intake now (not at the first call). Raises ``TypeError``."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema["additionalProperties"] = False
    for secret_name in secret:
        prop = schema.get("properties", {}).get(secret_name)
        if not isinstance(prop, dict):
            raise TypeError(f"tool {tool_name}: secret argument {secret_name!r} is not one of its arguments")
        prop["writeOnly"] = True
    try:
        compile_schema(schema, intake=True)
    except UnusableSchema as err:
        raise TypeError(f"tool {tool_name}: its argument schema is unusable: {err}") from None
    return schema


class Tool(Generic[P, T]):
    """A typed function with a contract. Build it with ``@tool(...)``.

    Works on plain functions, async functions and methods (as a descriptor it binds to
    the instance, so ``obj.read_order`` is a tool bound to ``obj``).
    """

    def __init__(
        self, function: Callable[P, Awaitable[T]] | Callable[P, T], **options: Unpack[ToolOptions]
    ) -> None:
        # Options not given keep ``ToolSpec``'s defaults: the defaults have one owner.
        if unknown := options.keys() - ToolOptions.__annotations__.keys():
            raise TypeError(f"unknown tool option(s): {', '.join(sorted(unknown))}")
        self.function = function
        secret_arguments = options.get("secret_arguments", ())
        if isinstance(secret_arguments, str):
            raise TypeError("secret_arguments is a list of argument names, not one string")
        secret = tuple(secret_arguments)
        self._options: ToolOptions = {**options, "secret_arguments": secret}
        egress = options.get("egress_argument")
        if egress is not None and not isinstance(egress, str):
            options = {**options, "egress_argument": tuple(egress)}
        # A plain function runs in a worker thread unless declared non-blocking (then inline).
        self._is_async = inspect.iscoroutinefunction(function)
        self.inline = not self._is_async and not options.get("blocking", True)
        tool_name = options.get("name") or function.__name__
        params = list(inspect.signature(function).parameters.values())
        self._is_method = bool(params) and params[0].name == "self"
        # Positional-only arguments (``def f(x, /)``) are passed by position, the rest by name.
        own = params[1:] if self._is_method else params
        self._positional = tuple(p.name for p in own if p.kind is p.POSITIONAL_ONLY)
        doc, documented = split_docstring((inspect.getdoc(function) or "").strip())
        self.arguments_model, self._context_param = _arguments_model(function, tool_name, own, documented)
        self._plain = _plain_fields(self.arguments_model)
        contract: dict[str, Any] = {k: v for k, v in options.items() if k in _SPEC_FIELDS}
        contract.update(
            name=tool_name,
            description=options.get("description") or doc,
            parameters=_argument_schema(self.arguments_model, tool_name, secret),
            effect=options.get("effect", Effect.READ),
            remote_name=tool_name,
        )
        self.spec = ToolSpec(**contract)
        if not self.spec.description:
            raise TypeError(f"tool {tool_name}: a description (docstring) is required")
        if unknown := set(self.spec.egress_arguments) - set(self.spec.parameters.get("properties", {})):
            named = ", ".join(sorted(unknown))
            raise TypeError(f"tool {tool_name}: egress_argument names no argument: {named}")
        self._bound: Any = None
        functools.update_wrapper(self, function)

    @property
    def name(self) -> str:
        return self.spec.name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Tool[P, T]: ...

    @overload
    def __get__(
        self: Tool[Concatenate[Any, _Q], _U], instance: object, owner: type | None = None
    ) -> Tool[_Q, _U]: ...

    def __get__(self, instance: object, owner: type | None = None) -> Tool[Any, Any]:
        if instance is None:
            return self
        bound: Tool[Any, Any] = object.__new__(Tool)
        bound.__dict__.update(self.__dict__)
        bound._bound = instance
        return bound

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check JSON arguments with the host's intake rules; returns a copy. Raises ``ToolInputError``."""
        try:
            return check_arguments(self.spec.parameters, arguments)
        except PolicyError as err:
            raise ToolInputError(
                f"invalid arguments for {self.name}: {err}",
                hint="call again with arguments that match the tool's schema exactly",
                details={"reason": err.reason, **err.details},
            ) from None

    def build(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The typed Python arguments from JSON arguments the schema has accepted (pydantic in strict
        JSON mode: representations converted, types never coerced); a custom validator's failure is a
        ``ToolInputError``."""
        plain = self._plain
        if plain is not None and len(arguments) <= len(plain):
            out: dict[str, Any] = {}
            for name, kind, optional, default in plain:
                value = arguments.get(name, _REQUIRED)
                if value is _REQUIRED:
                    if default is _REQUIRED:
                        break  # pydantic says what is missing, below
                    out[name] = default
                elif type(value) is kind or (optional and value is None):
                    out[name] = value
                elif kind is float and type(value) is int and abs(value) < 2**53:
                    out[name] = float(value)  # what strict JSON mode makes of an integer
                else:
                    break
            else:
                if len(out) == len(plain) and all(k in out for k in arguments):
                    return out
        try:
            text = _ARGUMENTS_JSON.encode(arguments)
            model = self.arguments_model.model_validate_json(text, strict=True)
        except ValidationError as err:
            raise ToolInputError(
                f"invalid arguments for {self.name}: {validation_problems(err, top='(arguments)')}",
                hint="call again with arguments that match the tool's schema exactly",
            ) from None
        return {k: getattr(model, k) for k in self.arguments_model.model_fields}

    def received(self, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """The JSON ``arguments`` as the function receives them, once its own validators ran (a
        ``BeforeValidator`` that decodes or strips, a ``model_validator`` that fills one argument
        from another), where that differs from ``arguments``; ``None`` where it does not, or where
        they fail validation (the call then runs nothing). The values are read as the function
        gets them, never through the model's serializers (``as_data``: a serializer may print a
        decoded value back as it was given). What only a static default the schema states filled
        in, at any depth, is left out, as the call left it: the policy reads the schema's defaults
        itself (what a ``default_factory`` fills is in no schema: it is received)."""
        if self._plain is not None:
            return None  # bare types, no validators: what is given is what is received
        try:
            text = _ARGUMENTS_JSON.encode(arguments)
            model = self.arguments_model.model_validate_json(text, strict=True)
        except (ValidationError, ValueError, TypeError):
            return None
        out = as_data(model)
        return None if out == arguments else out

    async def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolOutput:
        """Run the tool on JSON arguments the host's gate has checked (``validate`` them first
        when calling by hand). ``ToolError`` subclasses are recoverable; anything else propagates."""
        kwargs = self.build(arguments)
        if self._context_param is not None:
            if context is None:
                raise TypeError(f"tool {self.name} needs a ToolContext")
            kwargs[self._context_param] = context
        fn: Callable[..., Any] = self.function
        args: tuple[Any, ...] = (self._bound,) if self._is_method else ()
        args += tuple(kwargs.pop(name) for name in self._positional)
        if self._is_method and self._bound is None:
            raise TypeError(f"tool {self.name} is a method: use it from an instance")
        try:
            if self.inline:
                value = fn(*args, **kwargs)  # declared non-blocking: no thread, no cancel scope
            elif not self._is_async:
                # A thread cannot be stopped: past ``timeout_s`` the call ends, the thread runs on.
                call = functools.partial(fn, *args, **kwargs)
                value = await run_in_thread(self.name, self.function, call, self.spec.timeout_s)
            else:
                with cancel_after(self.spec.timeout_s) as deadline:
                    value = await fn(*args, **kwargs)
                if deadline.cancelled_caught:
                    raise TimedOut(self.name, self.spec.timeout_s)
        except TimeoutError:  # the function's own (a socket's): the call failed, as ever
            raise TimedOut(self.name, self.spec.timeout_s) from None
        except BaseExceptionGroup as group:
            raise unwrap_exception_group(group) from None
        text, data = _rendered(value)
        return ToolOutput(text=text, data=data)

    def with_options(self, **changes: Unpack[ToolOptions]) -> Tool[P, T]:
        """A copy with other contract options (e.g. another effect)."""
        options: ToolOptions = {**self._options, **changes}
        new = Tool(self.function, **options)
        new._bound = self._bound
        return new

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call the function itself (no contract check): a tool stays usable as the function."""
        fn: Callable[..., Any] = self.function
        bound = (self._bound,) if self._is_method else ()
        result = fn(*bound, *args, **kwargs)
        return cast(T, await result if isinstance(result, Awaitable) else result)


class _ToolDecorator(Protocol):
    @overload
    def __call__(self, function: Callable[P, Awaitable[T]], /) -> Tool[P, T]: ...
    @overload
    def __call__(self, function: Callable[P, T], /) -> Tool[P, T]: ...


@overload
def tool(function: Callable[P, Awaitable[T]], /, **options: Unpack[ToolOptions]) -> Tool[P, T]: ...
@overload
def tool(function: Callable[P, T], /, **options: Unpack[ToolOptions]) -> Tool[P, T]: ...
@overload
def tool(function: None = None, /, **options: Unpack[ToolOptions]) -> _ToolDecorator: ...
def tool(
    function: Callable[..., Any] | None = None, /, **options: Unpack[ToolOptions]
) -> Tool[..., Any] | _ToolDecorator:
    """Declare a tool: ``@tool`` or ``@tool(effect=Effect.WRITE, target=Target("order_id", "order"))``.

    ``blocking=False`` declares a plain (sync) function that never blocks (no I/O, quick): it runs
    inline on the event loop instead of in a worker thread. Async functions never use a thread.

    ``secret_arguments=("api_token",)`` declares arguments secret (their schema gets
    ``writeOnly: true``; a ``SecretStr`` argument or ``Field(json_schema_extra={"writeOnly": True})``
    says the same): their values are masked on the console, in the API, in traces and in
    OpenTelemetry. Nothing is masked because of its name."""

    def wrap(fn: Callable[..., Any]) -> Tool[..., Any]:
        return Tool(fn, **options)

    return wrap(function) if function is not None else cast(_ToolDecorator, wrap)
