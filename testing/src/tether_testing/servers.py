"""Loopback servers for the Anthropic Messages API and the OpenAI Responses API, on 127.0.0.1,
for tests, demos and benchmarks: drive ``AnthropicMessages`` or ``OpenAIResponses`` (or the
official SDKs themselves) with no key and no network.

Each speaks its protocol as the public reference documents it — the SSE event names, their
order and payloads, the error bodies (``{"type": "error", "error": {...}}`` for Anthropic, 529
``overloaded_error`` included; ``{"error": {...}}`` for OpenAI), ``retry-after`` — and answers
with the same ``Reply`` as ``FakeChatServer``, whose HTTP handling, recording of every request
and faults (errors, delays, dropped connections, trickled bytes) they share.
``Reply.finish_reason`` is the protocol's own value: a ``stop_reason`` for Anthropic
(``end_turn``, ``max_tokens``, ``refusal``, ``pause_turn`` …); for Responses, ``max_output_tokens``
or ``content_filter`` make the response ``incomplete`` with that reason, ``refusal`` answers
with a refusal part. ``Reply.reasoning`` is a thinking block (Anthropic, with a signature) or a
reasoning item with a summary and encrypted content (Responses). ``cut`` values that apply:
``after_headers``, ``mid_chunk``, ``before_finish`` (no ``message_delta`` or terminal event),
``before_done`` (no terminal event: for Anthropic, ``message_delta`` and no ``message_stop``),
``error_event``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from abc import ABC, abstractmethod
from typing import Any

from tether_testing.fake_server import FakeChatServer, Reply

__all__ = ["FakeAnthropicServer", "FakeResponsesServer", "serve_tool_loop", "tool_loop"]


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


# The event that says how an answer ended: Anthropic's ``message_delta`` (its stop reason), a
# Responses terminal event.
_FINISHING = ("message_delta", "response.completed", "response.incomplete", "response.failed")


class _SseServer(FakeChatServer, ABC):
    """What both servers share: SSE events with ``event:`` lines, the stream cuts."""

    def encode_event(self, event: dict[str, Any]) -> bytes:
        return f"event: {event.get('type')}\ndata: {json.dumps(event)}\n\n".encode()

    def events(self, request: dict[str, Any], reply: Reply) -> list[Any]:
        events: list[Any] = self.protocol_events(request, reply)
        if reply.cut == "before_done":
            events = events[:-1]
        elif reply.cut == "before_finish":  # the events before the one that says how it ended
            events = events[: next(i for i, e in enumerate(events) if e.get("type") in _FINISHING)]
        elif reply.cut == "error_event":
            events = [*events[:3], self.error_event()]
        return events

    # -- what each protocol fills in ----------------------------------------------------------

    @abstractmethod
    def error_body(self, reply: Reply) -> dict[str, Any]:
        """The protocol's error body for a failing reply."""

    @abstractmethod
    def error_event(self) -> dict[str, Any]:
        """The protocol's error event inside a stream."""

    @abstractmethod
    def whole(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The protocol's whole (not streamed) answer."""

    @abstractmethod
    def protocol_events(self, request: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        """The protocol's stream events, in order."""


class FakeAnthropicServer(_SseServer):
    """The Messages API (``POST {url}/v1/messages``; ``url`` is the SDK's ``base_url``)."""

    endpoint = "/v1/messages"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def error(status: int, message: str = "error", *, kind: str | None = None, **kw: Any) -> Reply:
        """An error answer with Anthropic's body; ``kind`` defaults by status (529:
        ``overloaded_error``, 429: ``rate_limit_error``, …)."""
        kinds = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            500: "api_error",
            529: "overloaded_error",
        }
        body = {
            "type": "error",
            "error": {"type": kind or kinds.get(status, "api_error"), "message": message},
        }
        return Reply(status=status, error_body=body, **kw)

    def error_body(self, reply: Reply) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "api_error", "message": "error"}}

    def error_event(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    def _usage(self, reply: Reply) -> dict[str, Any]:
        u = reply.usage or {"input_tokens": 100, "output_tokens": 10}
        if "input_tokens" in u:
            return {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, **u}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return {
            "input_tokens": u.get("prompt_tokens", 0) - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": u.get("completion_tokens", 0),
        }

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.reasoning is not None:
            signature = hashlib.sha256(reply.reasoning.encode()).hexdigest()
            blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
        if reply.content is not None:
            blocks.append({"type": "text", "text": reply.content})
        for name, arguments in reply.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{next(self._ids):04d}",
                    "name": name,
                    "_arguments": arguments,
                }
            )
        return blocks

    def _stop_reason(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def whole(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content = []
        for b in self._blocks(reply):
            if b["type"] == "tool_use":
                raw = b.pop("_arguments")
                b["input"] = json.loads(raw) if raw.strip() else {}
            content.append(b)
        return {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": request.get("model", self.model),
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def protocol_events(self, request: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        usage = self._usage(reply)
        start_usage = {**usage, "output_tokens": 1}
        message = {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": request.get("model", self.model),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        out: list[dict[str, Any]] = [{"type": "message_start", "message": message}, {"type": "ping"}]
        for index, block in enumerate(self._blocks(reply)):
            kind = block["type"]
            if kind == "thinking":
                out.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    }
                )
                for piece in _pieces(block["thinking"], reply.chunks):
                    delta = {"type": "thinking_delta", "thinking": piece}
                    out.append({"type": "content_block_delta", "index": index, "delta": delta})
                delta = {"type": "signature_delta", "signature": block["signature"]}
                out.append({"type": "content_block_delta", "index": index, "delta": delta})
            elif kind == "text":
                out.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    }
                )
                for piece in _pieces(block["text"], reply.chunks):
                    out.append(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        }
                    )
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                out.append({"type": "content_block_start", "index": index, "content_block": start})
                for piece in _pieces(block["_arguments"], reply.chunks):
                    out.append(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        }
                    )
            out.append({"type": "content_block_stop", "index": index})
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(reply), "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            }
        )
        out.append({"type": "message_stop"})
        return out


class FakeResponsesServer(_SseServer):
    """The Responses API (``POST {url}/responses``; ``url`` ends in ``/v1``)."""

    endpoint = "/responses"

    @staticmethod
    def error(status: int, message: str = "error", *, code: str | None = None, **kw: Any) -> Reply:
        """An error answer with OpenAI's body (``{"error": {"message", "type", "param", "code"}}``)."""
        kinds = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            429: "rate_limit_exceeded",
            500: "server_error",
            503: "server_error",
        }
        kind = kinds.get(status, "server_error")
        body = {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}
        return Reply(status=status, error_body=body, **kw)

    def error_body(self, reply: Reply) -> dict[str, Any]:
        return {"error": {"message": "error", "type": "server_error", "param": None, "code": "server_error"}}

    def error_event(self) -> dict[str, Any]:
        return {
            "type": "error",
            "code": "server_error",
            "message": "The server had an error",
            "param": None,
            "sequence_number": 99,
        }

    def _usage(self, reply: Reply) -> dict[str, Any]:
        u = reply.usage or {"prompt_tokens": 100, "completion_tokens": 10}
        if "input_tokens" in u:
            return u
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        reasoning = (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
        prompt, completion = u.get("prompt_tokens", 0), u.get("completion_tokens", 0)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion,
        }

    def _items(self, reply: Reply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.reasoning is not None:
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{next(self._ids):04d}",
                    "summary": [{"type": "summary_text", "text": reply.reasoning}],
                    "encrypted_content": "enc:" + hashlib.sha256(reply.reasoning.encode()).hexdigest(),
                }
            )
        if reply.content is not None:
            part: dict[str, Any] = (
                {"type": "refusal", "refusal": reply.content}
                if reply.finish_reason == "refusal"
                else {"type": "output_text", "text": reply.content, "annotations": []}
            )
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{next(self._ids):04d}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        for name, arguments in reply.tool_calls:
            n = next(self._ids)
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n:04d}",
                    "call_id": f"call_{n:04d}",
                    "name": name,
                    "arguments": arguments,
                    "status": "completed",
                }
            )
        return items

    def _response(
        self, request: dict[str, Any], reply: Reply, output: list[dict[str, Any]], rid: str
    ) -> dict[str, Any]:
        incomplete = reply.finish_reason in ("max_output_tokens", "content_filter")
        status = (
            "incomplete"
            if incomplete
            else (reply.finish_reason if reply.finish_reason not in (None, "refusal") else "completed")
        )
        return {
            "id": rid,
            "object": "response",
            "created_at": 0,
            "status": status,
            "model": request.get("model", self.model),
            "output": output,
            "incomplete_details": {"reason": reply.finish_reason} if incomplete else None,
            "error": None,
            "usage": self._usage(reply),
            "parallel_tool_calls": True,
            "tools": [],
            "tool_choice": request.get("tool_choice", "auto"),
        }

    def whole(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return self._response(request, reply, self._items(reply), f"resp_{next(self._ids):04d}")

    def protocol_events(self, request: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        rid = f"resp_{next(self._ids):04d}"
        items = self._items(reply)
        start = {
            **self._response(request, reply, [], rid),
            "status": "in_progress",
            "usage": None,
            "incomplete_details": None,
        }
        out: list[dict[str, Any]] = [
            {"type": "response.created", "response": start},
            {"type": "response.in_progress", "response": start},
        ]
        for index, item in enumerate(items):
            kind = item["type"]
            if kind == "reasoning":
                added = {**item, "summary": []}
                out.append({"type": "response.output_item.added", "output_index": index, "item": added})
                text = item["summary"][0]["text"]
                part = {"type": "summary_text", "text": ""}
                out.append(
                    {
                        "type": "response.reasoning_summary_part.added",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": 0,
                        "part": part,
                    }
                )
                for piece in _pieces(text, reply.chunks):
                    out.append(
                        {
                            "type": "response.reasoning_summary_text.delta",
                            "item_id": item["id"],
                            "output_index": index,
                            "summary_index": 0,
                            "delta": piece,
                        }
                    )
                out.append(
                    {
                        "type": "response.reasoning_summary_text.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": 0,
                        "text": text,
                    }
                )
                out.append(
                    {
                        "type": "response.reasoning_summary_part.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": 0,
                        "part": {**part, "text": text},
                    }
                )
            elif kind == "message":
                added = {**item, "status": "in_progress", "content": []}
                out.append({"type": "response.output_item.added", "output_index": index, "item": added})
                part = item["content"][0]
                empty = {**part, "text": ""} if part["type"] == "output_text" else {**part, "refusal": ""}
                out.append(
                    {
                        "type": "response.content_part.added",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": empty,
                    }
                )
                text = part.get("text", part.get("refusal", ""))
                prefix = "response.output_text" if part["type"] == "output_text" else "response.refusal"
                for piece in _pieces(text, reply.chunks):
                    out.append(
                        {
                            "type": f"{prefix}.delta",
                            "item_id": item["id"],
                            "output_index": index,
                            "content_index": 0,
                            "delta": piece,
                        }
                    )
                done_key = "text" if part["type"] == "output_text" else "refusal"
                out.append(
                    {
                        "type": f"{prefix}.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        done_key: text,
                    }
                )
                out.append(
                    {
                        "type": "response.content_part.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": part,
                    }
                )
            else:
                added = {**item, "arguments": "", "status": "in_progress"}
                out.append({"type": "response.output_item.added", "output_index": index, "item": added})
                for piece in _pieces(item["arguments"], reply.chunks):
                    out.append(
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": item["id"],
                            "output_index": index,
                            "delta": piece,
                        }
                    )
                out.append(
                    {
                        "type": "response.function_call_arguments.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "arguments": item["arguments"],
                    }
                )
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        final = self._response(request, reply, items, rid)
        terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        out.append({"type": terminal, "response": final})
        for n, event in enumerate(out):
            event["sequence_number"] = n
        return out


def tool_loop(protocol: str, steps: int | None = None, *, tool: str = "lookup") -> Any:
    """A responder for ``protocol`` (``anthropic`` or ``responses``): ask for ``tool`` until the
    request holds ``steps`` results (``None``: ``steps=N`` read from the first user text), then
    answer. The counterpart of ``tether_testing.fake_server.tool_loop_responder``."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        if protocol == "anthropic":
            turns = request.get("messages", ())
            blocks = [
                b
                for m in turns
                for b in (
                    m["content"]
                    if isinstance(m.get("content"), list)
                    else [{"type": "text", "text": m.get("content")}]
                )
            ]
            texts = [str(b.get("text") or "") for b in blocks if b.get("type") == "text"]
            done = sum(1 for b in blocks if b.get("type") == "tool_result")
        else:
            items = request.get("input", ())
            texts = [str(i.get("content", "")) for i in items if i.get("role") == "user"]
            done = sum(1 for i in items if i.get("type") == "function_call_output")
        target = steps
        if target is None:
            found = re.search(r"steps=(\d+)", texts[0] if texts else "")
            target = int(found.group(1)) if found else 1
        if done < target:
            return Reply(tool_calls=((tool, json.dumps({"key": f"k{done}"})),), chunks=1)
        return Reply(content=f"done after {done} steps", chunks=1)

    return respond


def serve_tool_loop() -> None:  # pragma: no cover - exercised by bench/backends.py
    """Serve ``tool_loop`` for the protocol named on the command line; print the URL first."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Serve a scripted tool loop on 127.0.0.1.")
    parser.add_argument("protocol", choices=("anthropic", "responses"))
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    kind = FakeAnthropicServer if args.protocol == "anthropic" else FakeResponsesServer
    server = kind(tool_loop(args.protocol), port=args.port)

    def ready(url: str) -> None:
        sys.stdout.write(url + "\n")
        sys.stdout.flush()

    asyncio.run(server.serve(ready))


if __name__ == "__main__":
    serve_tool_loop()
