"""A small Okapi BM25 ranker (no dependencies), used by tool search."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["BM25", "tokenize"]

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case words; snake_case and camelCase identifiers split into their parts."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ")
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 over a fixed corpus (``k1`` term saturation, ``b`` length normalisation)."""

    def __init__(self, documents: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out = []
        for counts, length in zip(self.docs, self.lengths, strict=True):
            score = 0.0
            for t in terms:
                f = counts.get(t, 0)
                if not f:
                    continue
                norm = f + self.k1 * (1 - self.b + self.b * length / (self.avg or 1))
                score += self.idf[t] * f * (self.k1 + 1) / norm
            out.append(score)
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Indexes of the best ``k`` documents with a positive score, best first (ties by index)."""
        ranked = sorted(
            ((i, s) for i, s in enumerate(self.scores(query)) if s > 0), key=lambda x: (-x[1], x[0])
        )
        return ranked[:k]
