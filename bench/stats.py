"""Small statistics over noisy samples: medians of rounds, percentiles, paired ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (``fraction`` in 0..1), like numpy's default."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline else math.nan


def paired_ratio(values: Sequence[float], baselines: Sequence[float]) -> float:
    """Median of per-round ratios: each round's pair was measured minutes apart at most,
    so the median of pairs cancels slow drifts in machine load better than a ratio of
    medians would."""
    return median([ratio(v, b) for v, b in zip(values, baselines, strict=True)])
