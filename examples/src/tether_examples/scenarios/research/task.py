"""A long, scripted research task for the context engine (seed 002, experiment 2-10 in spirit).

"Who co-founded Halcyon Labs, and where does each co-founder work now?" A ``web_search``
tool returns pages from 2 KB to 150 KB: navigation, ads and filler around a few facts, each
fact with a ``[source: …]`` citation. The researcher is a deterministic model stand-in that
reads only what its request shows: it searches for the founder list, then for each founder,
re-searching (at most twice) when a fact it needs is not visible, and answers with the facts
it can see. Summaries are written by a deterministic extractive stand-in behind the same
``Model`` protocol: *plain* keeps the most informative sentences (digits, names), up to about
11% of the page; *task-aware* keeps the sentences that share terms with the query and the
accumulated context. The figures this drives are about the harness (tokens per request,
compressions, prefix reuse), not about the quality of a real model.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from tether.core.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, call
from tether.tools._contract import Tool, tool

__all__ = ["COMPANY", "FOUNDERS", "OBJECTIVE", "Research", "completed"]

COMPANY = "Halcyon Labs"
OBJECTIVE = f"Who co-founded {COMPANY}, and where does each co-founder work now? Cite sources."


@dataclass(frozen=True, slots=True)
class Founder:
    name: str
    left: str
    org: str
    role: str

    @property
    def slug(self) -> str:
        return self.name.lower().replace(" ", "-")

    def fact(self) -> str:
        return (
            f"{self.name} left {COMPANY} in {self.left} to join {self.org} as {self.role}. "
            f"[source: https://news.example/{self.slug}-moves]"
        )


FOUNDERS = (
    Founder("Ines Vasquez", "May 2024", "Northwind Robotics", "chief scientist"),
    Founder("Tomas Berg", "March 2023", "Keel Energy", "chief executive"),
    Founder("Amara Okafor", "January 2025", "the Lisbon Institute", "research director"),
    Founder("Kenji Mori", "September 2022", "Aster Capital", "partner"),
    Founder("Lena Fischer", "July 2024", "Quill Health", "head of engineering"),
)
# Page size (characters) of each search, founder page by founder page: 2 KB to 150 KB.
DEFAULT_SIZES = (2_000, 150_000, 90_000, 120_000, 30_000, 150_000)

_NAV = "Home | World | Markets | Technology | Opinion | Subscribe | Sign in"
_ORGS = ("Orion Partners", "Vela Group", "Cobalt Research", "Meridian Bank", "Lumen Analytics")
_TOPICS = ("cloud spending", "chip supply", "venture funding", "battery prices", "ad revenue")


def _filler(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        pct, day = rng.randrange(10, 60), rng.randrange(1, 28)
        return f"Save {pct}% on a premium subscription until {day} December."
    if kind == 1:
        org, topic = rng.choice(_ORGS), rng.choice(_TOPICS)
        return f"Analysts at {org} said {topic} grew {rng.randrange(2, 40)}% in {rng.randrange(2015, 2026)}."
    if kind == 2:
        return "Readers also viewed: ten gadgets for the holidays, and why your router needs a reboot."
    return f"Markets closed mixed on Tuesday as investors weighed {rng.choice(_TOPICS)} and rates."


def page(query: str, size: int, facts: Sequence[str], seed: int) -> str:
    """A deterministic page of about ``size`` characters with ``facts`` at seeded positions."""
    rng = random.Random(seed)
    sentences: list[str] = []
    total = 0
    while total < size:
        s = _filler(rng)
        sentences.append(s)
        total += len(s) + 1
    for f in facts:
        sentences.insert(rng.randrange(len(sentences) + 1), f)
    paragraphs, i = [f"Search results for: {query}", _NAV], 0
    while i < len(sentences):
        n = rng.randrange(3, 8)
        paragraphs.append(" ".join(sentences[i : i + n]))
        i += n
    paragraphs.append(_NAV)
    return "\n\n".join(paragraphs)


class Research:
    """The task's environment: the search tool, the researcher and the summariser stand-ins."""

    def __init__(self, sizes: Sequence[int] = DEFAULT_SIZES, *, plan: bool = True) -> None:
        if len(sizes) != len(FOUNDERS) + 1:
            raise ValueError(f"sizes needs {len(FOUNDERS) + 1} entries: the founder list, then each founder")
        self.sizes = tuple(sizes)
        self.plan = plan
        self.searches: list[str] = []
        self.summaries = 0

    # -- the environment ----------------------------------------------------------------------

    def search(self, query: str) -> str:
        self.searches.append(query)
        q = query.lower()
        if "co-founders" in q:
            names = ", ".join(f.name for f in FOUNDERS[:-1]) + f" and {FOUNDERS[-1].name}"
            fact = f"{COMPANY} was co-founded in 2015 by {names}. [source: https://news.example/halcyon-founding]"
            return page(query, self.sizes[0], [fact], seed=1)
        for i, f in enumerate(FOUNDERS):
            if f.name.lower() in q:
                return page(query, self.sizes[i + 1], [f.fact()], seed=10 + i)
        return page(query, 2_000, [], seed=99)

    def tools(self) -> list[Tool]:
        env = self

        @tool(name="web_search", max_result_chars=400_000)
        def web_search(query: Annotated[str, Field(min_length=1, description="Search terms.")]) -> str:
            """Search the web; returns the text of the best page."""
            return env.search(query)

        return [web_search]

    # -- the model stand-in -------------------------------------------------------------------

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, name="researcher")

    def _respond(self, request: ModelRequest) -> Any:
        if request.metadata.get("purpose") == "compression":
            return AssistantMessage(content=self._summarize(request))
        visible = "\n".join(
            m.content for m in request.messages if isinstance(m, (UserMessage, ToolMessage)) and m.content
        )
        asked = [
            json.loads(c.arguments)["query"]
            for m in request.messages
            if isinstance(m, AssistantMessage)
            for c in m.tool_calls
            if c.name == "web_search"
        ]
        tool_names = {t["function"]["name"] for t in request.tools}
        if (
            self.plan
            and "rewrite_todo_list" in tool_names
            and not any(
                isinstance(m, AssistantMessage)
                and m.tool_calls
                and m.tool_calls[0].name == "rewrite_todo_list"
                for m in request.messages
            )
        ):
            items = [{"content": "find the co-founders"}] + [
                {"content": f"find where co-founder {i + 1} works now"} for i in range(len(FOUNDERS))
            ]
            return call("rewrite_todo_list", items=items)
        if not re.search(rf"{COMPANY} was co-founded in 2015 by", visible):
            query = f"{COMPANY} co-founders"
            if asked.count(query) < 2:
                return call("web_search", query=query)
            return self._answer(visible)
        for f in FOUNDERS:
            if f.fact().split(" [source")[0] in visible:
                continue
            query = f"{f.name} career after {COMPANY}"
            if asked.count(query) < 2:
                return call("web_search", query=query)
        return self._answer(visible)

    @staticmethod
    def _answer(visible: str) -> AssistantMessage:
        found = [f.fact() for f in FOUNDERS if f.fact().split(" [source")[0] in visible]
        lines = [f"{COMPANY} co-founders and where they work now:"]
        lines += [f"- {fact}" for fact in found] or ["- nothing verified"]
        return AssistantMessage(content="\n".join(lines))

    def _summarize(self, request: ModelRequest) -> str:
        self.summaries += 1
        prompt = request.messages[-1].content or ""
        _, _, output = prompt.partition(" output of ")
        output = output.partition(":\n")[2]
        limit = int(m.group(1)) if (m := re.search(r"At most (\d+) characters", prompt)) else 4000
        sentences = [s for s in re.split(r"(?<=[.\]])\s+", output) if s.strip()]
        query = re.search(r"Given the search query: (.*)", prompt)
        if query is None:  # plain: the most informative sentences, about 11% of the page
            budget = min(limit, max(200, len(output) * 11 // 100))
            ranked = sorted(range(len(sentences)), key=lambda i: (-_informative(sentences[i]), i))
        else:
            context = re.search(r"Current context: (.*)", prompt)
            terms = _terms(query.group(1)) | _terms(context.group(1) if context else "")
            budget = min(limit, 2000)
            ranked = sorted(range(len(sentences)), key=lambda i: (-len(_terms(sentences[i]) & terms), i))
            ranked = [i for i in ranked if _terms(sentences[i]) & _terms(query.group(1))]
        keep, used = [], 0
        for i in ranked:
            if used + len(sentences[i]) + 1 > budget:
                break
            keep.append(i)
            used += len(sentences[i]) + 1
        return " ".join(sentences[i] for i in sorted(keep)) or "No relevant facts."


_STOP = {"the", "and", "of", "in", "to", "a", "after", "for", "on", "as", "at", "by", "web_search", "search"}


def _terms(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP and len(w) > 2}


def _informative(sentence: str) -> int:
    return len(re.findall(r"\d", sentence)) + 2 * len(re.findall(r"\b[A-Z][a-z]+ [A-Z][a-z]+", sentence))


def completed(answer: str | None) -> bool:
    """The task is done when the answer states every co-founder's move."""
    return bool(answer) and all(f.fact().split(" [source")[0] in (answer or "") for f in FOUNDERS)


def system_prompt() -> str:
    return SystemMessage(
        "You are a research agent. Use web_search; answer only from what the pages say, with citations."
    ).content
