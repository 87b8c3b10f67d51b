"""The TODO list of the status bar: run state kept by code, edited by the model only through
``rewrite_todo_list`` (the whole plan) and ``update_todo_status`` (one item)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.errors import ToolInputError
from tether.tools._contract import Tool, tool

__all__ = ["TodoDraft", "TodoItem", "TodoList", "TodoStatus"]

TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]
_Status = Annotated[TodoStatus, Field(description="pending, in_progress, completed or cancelled.")]


class TodoDraft(BaseModel):
    """One item as the model writes it in ``rewrite_todo_list``."""

    model_config = ConfigDict(strict=True, extra="forbid")
    content: Annotated[str, Field(min_length=1, max_length=500, description="What to do, one step.")]
    status: _Status = "pending"


@dataclass(frozen=True, slots=True)
class TodoItem:
    id: str
    content: str
    status: TodoStatus
    updated_at: datetime

    def render(self) -> str:
        return f"[{self.id}] {self.content} ({self.status}, {self.updated_at.isoformat(timespec='seconds')})"


class TodoList:
    """Per-run TODO list and the two tools that edit it."""

    MAX_ITEMS = 50

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or (lambda: datetime.now(UTC))
        self.items: list[TodoItem] = []
        self._next = 1

    def rewrite(self, drafts: list[TodoDraft]) -> list[TodoItem]:
        if len(drafts) > self.MAX_ITEMS:
            raise ToolInputError(
                f"a TODO list holds at most {self.MAX_ITEMS} items", hint="merge small steps into larger ones"
            )
        now = self._clock()
        self.items = [
            TodoItem(str(self._next + k), d.content.strip(), d.status, now) for k, d in enumerate(drafts)
        ]
        self._next += len(drafts)
        return self.items

    def update(self, item_id: str, status: TodoStatus) -> TodoItem:
        for i, item in enumerate(self.items):
            if item.id == item_id:
                self.items[i] = TodoItem(item.id, item.content, status, self._clock())
                return self.items[i]
        known = ", ".join(i.id for i in self.items) or "none"
        raise ToolInputError(
            f"no TODO item with id {item_id!r} (known ids: {known})",
            hint="use an id shown in the TODO list of the status, or rewrite the list",
        )

    def render(self) -> list[str]:
        return [item.render() for item in self.items]

    # Declared once for the class (building a tool is costly); ``tools()`` binds them to one list.
    @tool(name="rewrite_todo_list", blocking=False)
    def rewrite_todo_list(
        self,
        items: Annotated[
            list[TodoDraft], Field(description="The whole plan, in order; replaces the previous list.")
        ],
    ) -> dict[str, object]:
        """Replace the TODO list with a new plan; items get fresh ids for update_todo_status."""
        self.rewrite(items)
        return {"todo": self.render()}

    @tool(name="update_todo_status", blocking=False)
    def update_todo_status(
        self,
        id: Annotated[str, Field(description="The item id, as shown in the TODO list, e.g. '2'.")],
        status: _Status,
    ) -> dict[str, object]:
        """Change the status of one TODO item."""
        return {"updated": self.update(id, status).render()}

    def tools(self) -> list[Tool]:
        return [self.rewrite_todo_list, self.update_todo_status]
