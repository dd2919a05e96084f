"""Quantiles from histogram buckets, the way Prometheus' histogram_quantile() computes them."""

from __future__ import annotations

import math
from collections.abc import Sequence


def bucket_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float:
    """`counts` per bucket (not cumulative), one more than `bounds` (the last is +Inf).

    Linear interpolation inside the bucket the rank falls in, from 0 for the first; a rank in
    the +Inf bucket gives the highest finite bound. NaN without observations.
    """
    total = sum(counts)
    if total <= 0:
        return math.nan
    rank = q * total
    acc = 0
    for i, c in enumerate(counts):
        if c and acc + c >= rank:
            if i >= len(bounds):
                return float(bounds[-1])
            lo = float(bounds[i - 1]) if i else 0.0
            return lo + (float(bounds[i]) - lo) * (rank - acc) / c
        acc += c
    return float(bounds[-1])


def nearest_rank(sorted_values: Sequence[int | float], q: float) -> float:
    """Nearest-rank quantile of sorted values (NaN when empty): what `replay --summary` uses."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]
