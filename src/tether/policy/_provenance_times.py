"""Times of day, for provenance rules: a date argument is compared by the calendar day it names
(``_provenance_dates``), and, where its value also carries a time of day and the request states
one, by that time too.

* A request **states a time** as ``10:00``, ``9:30``, ``3 pm``, ``3:30 p.m.``, ``10am``, ``at 10``,
  ``at 10 o'clock``, ``noon`` or ``midnight`` (one it turns down, "not at 10:00", states none).
  An hour written without am or pm is read on the 24-hour clock, and one from 1 to 7 also in the
  afternoon ("at 3" may be 15:00); 12 am is midnight.
* A value's **time** is the clock time it is written with (``2024-05-20 10:00``,
  ``2024-05-20T10:00:00``); a value with a UTC offset other than zero is the user's only where
  the request names a zone (``UTC+5``, ``GMT``, ``+05:00``): the same clock time in another zone
  is another moment.

So "reschedule my check-up to 2024-05-20 at 10:00" moves it to 10:00 that day, not to 22:00 or
to 10:00 in a zone the injection picked; a request that states no time of day leaves the time
to the agent, as before. An argument declared ``same_day_as`` another (an end time) is judged by
its day alone (``ProvenanceRules``): "to 10:00" does not say how long the event lasts.
"""

from __future__ import annotations

import re
from datetime import datetime

from tether.policy._provenance_mentions import refused
from tether.policy._provenance_values import unfold

__all__ = ["at_stated_time", "stated_times"]

_CLOCK = re.compile(
    r"(?:(?<=\dt)|(?<![\w:.]))(?P<h>\d{1,2}):(?P<m>[0-5]\d)(?::[0-5]\d)?(?:\s*(?P<ap>[ap])\.?m\b\.?)?(?![\w:])"
    r"|(?<![\w:.])(?P<h2>\d{1,2})\s*(?P<ap2>[ap])\.?m\b\.?"
    r"|\bat\s+(?P<h3>\d{1,2})(?:\s+o'?clock)?(?![\w:.,]\d|[\w:]|\s*[ap]\.?m\b)"
    r"|\b(?P<word>noon|midday|midnight)\b"
)
_ZONE = re.compile(r"\b(?:utc|gmt)\b|(?<![\w:])[+-]\d{1,2}(?::?\d\d)?\b(?!-)")
_AFTERNOON = range(1, 8)  # an hour without am or pm that may be meant in the afternoon


def stated_times(request: str) -> set[tuple[int, int]]:
    """The times of day (hour, minute) the request states (see the module docstring)."""
    folded = unfold(request).lower()
    out: set[tuple[int, int]] = set()
    for m in _CLOCK.finditer(folded):
        if refused(folded, *m.span()):
            continue
        if m.group("word"):
            out.add((0, 0) if m.group("word") == "midnight" else (12, 0))
            continue
        hour = int(m.group("h") or m.group("h2") or m.group("h3"))
        minute = int(m.group("m") or 0)
        half = m.group("ap") or m.group("ap2")
        if hour > 23 or (half and not 1 <= hour <= 12):
            continue
        if half:
            out.add((hour % 12 + (12 if half == "p" else 0), minute))
            continue
        out.add((hour, minute))
        if hour in _AFTERNOON:
            out.add((hour + 12, minute))
    return out


def at_stated_time(request: str, value: object) -> bool:
    """Whether the date ``value``'s time of day is one the request states: always where the
    value carries no time (a day alone) or the request states none; never where the request
    states one and the value's time cannot be read."""
    times = stated_times(request)
    if not times:
        return True
    if not isinstance(value, (str, datetime)):
        return True
    moment = value if isinstance(value, datetime) else _moment(value.strip())
    if moment is None:
        return _DAY.fullmatch(str(value).strip()) is not None
    if moment.tzinfo is None and _DAY.fullmatch(str(value).strip()):
        return True
    offset = moment.utcoffset()
    if offset and not _ZONE.search(unfold(request).lower()):
        return False
    return (moment.hour, moment.minute) in times


_DAY = re.compile(r"\d{4}[-/]\d{1,2}[-/]\d{1,2}")
_WRITTEN = re.compile(
    r"(?P<y>\d{4})[-/](?P<mo>\d{1,2})[-/](?P<d>\d{1,2})"
    r"(?:[ tT]+(?P<h>\d{1,2}):(?P<mi>\d{2})(?::\d{2}(?:\.\d+)?)?)?"
    r"\s*(?P<z>[zZ]|[+-]\d{2}:?\d{2})?"
)


def _moment(text: str) -> datetime | None:
    """The moment a date value writes, in the forms ``parse_date`` reads (single-digit months,
    slashes, a ``T`` or a space before the time); ``None`` when it writes none of them."""
    m = _WRITTEN.fullmatch(text)
    if m is not None:
        zone = (m.group("z") or "").upper().replace("Z", "+00:00")
        if zone and ":" not in zone:
            zone = f"{zone[:3]}:{zone[3:]}"
        clock = f"{int(m.group('h') or 0):02}:{m.group('mi') or '00'}"
        text = f"{m.group('y')}-{int(m.group('mo')):02}-{int(m.group('d')):02}T{clock}{zone}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
