"""Which metric families are exported: allow, deny and opt-in lists as kube-state-metrics has
them (`--metric-allowlist`, `--metric-denylist`, `--metric-opt-in-list`).

Each list holds regular expressions matched anywhere in the family name (kube-state-metrics uses
Go's `MatchString`; anchor with `^...$` for an exact name). An allowlist exports only the families
it matches, a denylist all but those; the two are mutually exclusive. Families the catalog marks
`opt_in` (expensive and seldom needed) are exported only when the opt-in list matches them, and
then still subject to the allow or deny list. A family name is the catalog's: counters with their
`_total`, histograms without `_bucket`.

A family not exported costs nothing at apply time for the per-object families (their rows are
never rendered; with none left, not even stored) and nothing at scrape time for any.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter import catalog


class FamilyListError(ValueError):
    """A list cannot be used: (flag, value, cause)."""

    def __init__(self, flag: str, value: str, cause: str) -> None:
        super().__init__(f"{flag} {value!r}: {cause}")
        self.flag, self.value, self.cause = flag, value, cause


def _compile(flag: str, patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as e:
            raise FamilyListError(flag, p, f"not a regular expression: {e}") from None
    return tuple(out)


@dataclass(frozen=True)
class FamilyFilter:
    allow: tuple[re.Pattern[str], ...] = ()
    deny: tuple[re.Pattern[str], ...] = ()
    opt_in: tuple[re.Pattern[str], ...] = ()
    opt_in_names: frozenset[str] = field(
        default_factory=lambda: frozenset(m.name for m in catalog.METRICS if m.opt_in))

    @classmethod
    def parse(cls, allow: Sequence[str] = (), deny: Sequence[str] = (),
              opt_in: Sequence[str] = ()) -> FamilyFilter:
        if allow and deny:
            raise FamilyListError("--metric-allowlist", ",".join(allow),
                                  "--metric-allowlist and --metric-denylist are mutually "
                                  "exclusive: give one")
        return cls(_compile("--metric-allowlist", allow), _compile("--metric-denylist", deny),
                   _compile("--metric-opt-in-list", opt_in))

    def included(self, name: str) -> bool:
        if name in self.opt_in_names and not any(r.search(name) for r in self.opt_in):
            return False
        if self.allow:
            return any(r.search(name) for r in self.allow)
        return not any(r.search(name) for r in self.deny)

    def why_hidden(self, names: Iterable[str]) -> dict[str, list[str]]:
        """The families of `names` not exported, grouped by why (a key of HIDDEN_BECAUSE), in
        the order given: what the start-up log says, so no family disappears unexplained."""
        out: dict[str, list[str]] = {}
        for name in names:
            if self.included(name):
                continue
            if name in self.opt_in_names and not any(r.search(name) for r in self.opt_in):
                why = "opt_in"
            else:
                why = "allowlist" if self.allow else "denylist"
            out.setdefault(why, []).append(name)
        return out

    def unmatched(self, names: Iterable[str]) -> list[str]:
        """Patterns that match no family name: most likely typos (said at start-up)."""
        names = list(names)
        return [r.pattern for r in (*self.allow, *self.deny, *self.opt_in)
                if not any(r.search(n) for n in names)]


HIDDEN_BECAUSE = {
    "opt_in": "opt-in for its cost: exported only when --metric-opt-in-list names it",
    "allowlist": "not matched by --metric-allowlist",
    "denylist": "matched by --metric-denylist",
}

EVERYTHING = FamilyFilter(opt_in_names=frozenset())
