"""Statistics for benchmark samples: mean, sample standard deviation, and Welch's t-test.

Pure Python (no numpy or scipy needed). The two-sided p-value of Welch's test comes from Student's
t distribution through the regularized incomplete beta function, evaluated with the Lentz continued
fraction (Numerical Recipes, 2nd ed., section 6.4); it agrees with scipy.stats.ttest_ind(equal_var=False)
to about 1e-10 (tests check tabulated values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator, as llama-bench); 0 for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between order statistics (numpy's default, as
    `vllm bench serve` reports them); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation: standard deviation over mean (0 when the mean is 0)."""
    m = mean(values)
    return stdev(values) / m if m else 0.0


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance t-test of two samples."""

    t: float
    df: float
    p_value: float  # two-sided

    def significant(self, alpha: float) -> bool:
        return self.p_value < alpha


def welch(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Test whether the means of `a` and `b` differ; None when either has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff = mean(b) - mean(a)
    if va + vb == 0:  # no noise at all: any difference is real, none is none
        return Welch(math.copysign(math.inf, diff) if diff else 0.0, math.inf, 0.0 if diff else 1.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Welch(t, df, t_two_sided_p(t, df))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return min(1.0, max(0.0, betainc(df / 2, 0.5, df / (df + t * t))))


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float, eps: float = 1e-15, max_iter: int = 500) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, max_iter + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h
