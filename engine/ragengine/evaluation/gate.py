"""The gate of a re-index: does the new version's score let it go live? Pure.

``minimum``: the new version must score at least this. ``max_regression``: it may score at most this much
below the live version on the same set and settings. Both may be given; with neither, the gate passes
whenever the new version scored (and only records the scores).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

EPSILON = 1e-9  # equal scores computed in another order are not a regression


@dataclass(frozen=True)
class Verdict:
    passed: bool
    metric: str
    candidate: float
    baseline: float | None
    minimum: float | None
    max_regression: float | None
    message: str
    candidate_run: str | None = None
    baseline_run: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def decide(metric: str, candidate: float, baseline: float | None, minimum: float | None,
           max_regression: float | None, *, version: int, live: int) -> Verdict:
    """The verdict on version ``version`` (scored ``candidate``) against live version ``live`` (``baseline``)."""
    failures = []
    if minimum is not None and candidate < minimum - EPSILON:
        failures.append(f"{metric} {candidate:.4f} is below the minimum {minimum:.4f}")
    if max_regression is not None and baseline is not None and candidate < baseline - max_regression - EPSILON:
        failures.append(f"{metric} {candidate:.4f} is {baseline - candidate:.4f} below live version {live}'s "
                        f"{baseline:.4f}, more than maxRegression {max_regression:.4f}")
    against = f" (live version {live}: {baseline:.4f})" if baseline is not None else ""
    if failures:
        message = f"version {version} rejected: " + "; ".join(failures)
    else:
        message = f"version {version} passed the gate: {metric} {candidate:.4f}{against}"
    return Verdict(not failures, metric, candidate, baseline, minimum, max_regression, message)
