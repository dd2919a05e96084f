"""promtool unit tests of the native-histogram SLO alerts, rendered to alerts/tests/native/.

The same burn-rate cases as the classic ones (`alerts.cases`: fast burn pages then tickets, slow
burn only tickets, resolves when the burn stops, a healthy neighbour never fires), with the
histograms written as native histogram input series (promtool 2.53+ reads them; 2.42 cannot, so
tests/test_alerts_native_promtool.py runs these files with Debian trixie's promtool, which
.ci/components fetches).

Two sets:
- `slo.yaml` against rules generated for `TEST_CONFIG` (alerts/tests/native/rules/): thresholds
  that are no classic bucket boundary, readiness 45 s (buckets 30, 60) and allocation ack 1.5 s
  (buckets 1, 2.5). Good observations sit at 0.9x the threshold and bad ones at 1.1x: for
  readiness 40.5 s and 49.5 s, both in the classic (30, 60] bucket, so classic rules could not
  tell them apart at all.
- `slo-shipped.yaml` against the shipped native rules (alerts/rules/native/, the classic
  thresholds).

Each value sits in a native bucket wholly on its side of the threshold (checked), so
`histogram_fraction` counts it exactly and the expected ratios are the classic cases' ones.
"""

from __future__ import annotations

import dataclasses
import re

from alerts import alerting, cases
from alerts.config import NATIVE_CONFIG, SLO, Config
from exporter.sinks.metrics import native

# Readiness 45 s, allocation ack 1.5 s: no classic bucket bound (a test checks).
TEST_CONFIG = dataclasses.replace(
    NATIVE_CONFIG, slos=(SLO("readiness", 0.99, 45.0), SLO("allocation_ack", 0.99, 1.5))
)
SCHEMA = native.DEFAULT_NATIVE.schema  # the exporter's buckets at its default resolution
GOOD, BAD = 0.9, 1.1  # observed values as multiples of the threshold
RULE_FILES = ("recording.yaml", "alerts.yaml")


def bucket_index(value: float) -> int:
    return native.bucket_index(value, SCHEMA)


def upper(index: int) -> float:
    """The inclusive upper bound of native bucket `index`: base^index, base = 2^(2^-schema)."""
    return 2.0 ** (index * 2.0**-SCHEMA)


def _expand(values: str) -> list[int]:
    """promtool's `a+bxn a+bxn ...` notation -> one value per step."""
    out: list[int] = []
    for seg in values.split():
        m = re.fullmatch(r"(\d+)\+(\d+)x(\d+)", seg)
        if m is None:
            raise ValueError(f"unsupported series notation {seg!r}")
        a, b, n = map(int, m.groups())
        out.extend(a + b * i for i in range(n + 1))
    return out


def native_hist(threshold: float) -> cases.HistSeries:
    """Writes a histogram's good/total counts as one native histogram series: good observations
    at GOOD x threshold, the others at BAD x threshold."""
    good_v, bad_v = GOOD * threshold, BAD * threshold
    lo, hi = bucket_index(good_v), bucket_index(bad_v)
    # Wholly on their sides: histogram_fraction(0, threshold) counts them without interpolating.
    assert upper(lo) <= threshold <= upper(hi - 1), (threshold, lo, hi)

    def h(good: int, bad: int) -> str:
        buckets = " ".join([str(good)] + ["0"] * (hi - lo - 1) + [str(bad)])
        return (f"{{{{schema:{SCHEMA} sum:{good * good_v + bad * bad_v:.10g} "
                f"count:{good + bad} offset:{lo} buckets:[{buckets}]}}}}")

    def series(name: str, labels: dict[str, str], good: str,
               total: str) -> list[tuple[str, str]]:
        g, t = _expand(good), _expand(total)
        assert len(g) == len(t), (good, total)
        # The last run of steps with constant increments as `{{start}}+{{inc}}xn`, the steps
        # before it one by one: promtool 2.53 cannot parse a value after an `xn` expansion of
        # native histograms ("unexpected {").
        n = len(g)
        if n == 1:
            return [(cases.sel(name, **labels), h(g[0], t[0] - g[0]))]
        dg, dt = g[-1] - g[-2], t[-1] - t[-2]
        i = n - 2
        while i > 0 and (g[i] - g[i - 1], t[i] - t[i - 1]) == (dg, dt):
            i -= 1
        segs = [h(g[k], t[k] - g[k]) for k in range(i)]
        segs.append(f"{h(g[i], t[i] - g[i])}+{h(dg, dt - dg)}x{n - 1 - i}")
        return [(cases.sel(name, **labels), " ".join(segs))]

    return series


def burn_cases(config: Config) -> list[cases.Case]:
    p = alerting.PREFIX
    out: list[cases.Case] = []
    for key, alert, what in (("readiness", f"{p}ReadinessBudgetBurn", "Readiness"),
                             ("allocation_ack", f"{p}AllocationAckBudgetBurn", "Allocation ack")):
        hist = native_hist(config.slo(key).threshold)
        for c in cases._burn_cases(config, key, alert, what, hist):
            c.name = f"native: {c.name} (threshold {config.slo(key).threshold:g} s)"
            out.append(c)
    return out


def test_documents() -> dict[str, dict[str, object]]:
    """File name (under alerts/tests/native/) -> promtool test document."""
    return {
        "slo.yaml": cases.document(TEST_CONFIG, burn_cases(TEST_CONFIG),
                                   [f"rules/{n}" for n in RULE_FILES]),
        "slo-shipped.yaml": cases.document(NATIVE_CONFIG, burn_cases(NATIVE_CONFIG),
                                           [f"../../rules/native/{n}" for n in RULE_FILES]),
    }
