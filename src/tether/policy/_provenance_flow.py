"""Confidential data leaving in a call (``no_flow``): looked for in each argument, and across
the arguments a reader reads together (a mail's subject and its body), so a secret split
between two of them is still the secret."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_labels import split_values

__all__ = ["confidential_flow"]


def confidential_flow(
    index: ProvenanceIndex,
    arguments: Mapping[str, Any],
    schemas: Mapping[str, Any],
    classes: Iterable[str],
    *,
    each: bool = True,
) -> list[dict[str, Any]]:
    """The ``confidential_flow`` problems of a call whose ``arguments`` may carry no value of
    ``classes`` out: one per argument that holds one, else one for the arguments together when
    their values, read one after the other in either order, hold one across a boundary
    ("hunter2" in the subject, "Vx9" opening the body; "48" and "21"). ``each=False``: only
    across them (each was looked at already)."""
    wanted = frozenset(classes)
    if not wanted:
        return []
    found: list[dict[str, Any]] = []
    leaves: list[str] = []
    for arg, value in arguments.items():
        elements = split_values(value, schemas.get(arg))
        leaves.extend(elements)
        for element in elements if each else ():
            leaked = index.contained_segments(element, wanted)
            if leaked:
                found.append(
                    {"argument": arg, "problem": "confidential_flow", "from": leaked[0].label.describe()}
                )
                break
    if found or len(leaves) < 2:
        return found
    for joined in (" ".join(leaves), " ".join(reversed(leaves))):
        leaked = index.contained_segments(joined, wanted)
        if leaked:
            across = ", ".join(a for a, v in arguments.items() if v is not None)
            return [{"argument": across, "problem": "confidential_flow", "from": leaked[0].label.describe()}]
    return found
