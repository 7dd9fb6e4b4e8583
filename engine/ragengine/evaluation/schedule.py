"""When a scheduled evaluation is due: a five-field cron expression (UTC), a macro (``@hourly``, ``@daily``,
...), or an interval (``@every 6h``, or a Go duration ``30m``). Pure.

Cron as Kubernetes CronJobs read it: minute hour day-of-month month day-of-week, each ``*``, a number, a
range ``a-b``, a list ``a,b`` and a step ``*/n`` or ``a-b/n``; Sunday is 0 (7 too); when both day fields are
restricted, a day matching either is due (cron's rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
MIN_INTERVAL_S = 60.0


def interval_s(expr: str) -> float | None:
    """The period of an interval schedule (``@every 6h``, ``6h``); None for a cron schedule."""
    text = expr.strip().removeprefix("@every").strip()
    if not text or _DURATION.sub("", text):
        return None
    return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))


def _field(text: str, low: int, high: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if body == "*":
            start, end = low, high
        elif "-" in body:
            start, end = (int(x) for x in body.split("-", 1))
        else:
            start = end = int(body)
        if step < 1 or start < low or end > high or start > end:
            raise ValueError(f"{part!r} is outside {low}-{high}")
        out.update(range(start, end + 1, step))
    return out


@dataclass(frozen=True)
class Cron:
    minutes: set[int]
    hours: set[int]
    doms: set[int]
    months: set[int]
    dows: set[int]  # 0-6, Sunday 0
    any_day: bool  # one of the two day fields is '*': both must match (else either)


def parse(expr: str) -> float | Cron:
    """An interval in seconds, or the five cron fields as sets; ValueError with the reason otherwise."""
    period = interval_s(expr)
    if period is not None:
        if period < MIN_INTERVAL_S:
            raise ValueError(f"schedule {expr!r}: an interval must be at least {MIN_INTERVAL_S:.0f} s")
        return period
    fields = MACROS.get(expr.strip(), expr).split()
    if len(fields) != 5:
        raise ValueError(f"schedule {expr!r} is neither a five-field cron expression, a macro such as @daily, nor an "
                         "interval such as @every 6h")
    try:
        parsed = [_field(f, lo, hi) for f, (lo, hi) in zip(fields, _RANGES, strict=True)]
    except ValueError as exc:
        raise ValueError(f"schedule {expr!r}: {exc}") from None
    return Cron(parsed[0], parsed[1], parsed[2], parsed[3], {d % 7 for d in parsed[4]},
                fields[2] == "*" or fields[4] == "*")


def next_fire(expr: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` (naive UTC) when the schedule is due."""
    spec = parse(expr)
    if isinstance(spec, float):
        return after + timedelta(seconds=spec)
    start = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    day = start.replace(hour=0, minute=0)
    for _ in range(366 * 5):
        dom_ok, dow_ok = day.day in spec.doms, (day.isoweekday() % 7) in spec.dows
        # cron's rule: both day fields restricted -> either matches; else both must (one of them is '*')
        due_day = (dom_ok and dow_ok) if spec.any_day else (dom_ok or dow_ok)
        if day.month in spec.months and due_day:
            for hour in sorted(spec.hours):
                for minute in sorted(spec.minutes):
                    at = day.replace(hour=hour, minute=minute)
                    if at >= start:
                        return at
        day += timedelta(days=1)
    raise ValueError(f"schedule {expr!r} never fires")
