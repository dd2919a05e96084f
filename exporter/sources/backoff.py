"""Pauses between failed requests: exponential backoff with full jitter, reset on success.

Why not `backoff` or `tenacity`: both are well kept, but both own the retry loop (a decorator or
an iterator around one call that eventually gives up). The tailer's loop never gives up, treats
each error class differently, must honour the server's Retry-After and must stay cancellable at
any await; what it needs from a library is only the delay, which is three lines. A small class
with an injectable `random.Random` also makes the delays exact in tests, and the project gains no
dependency.
"""

from __future__ import annotations

import random


class Backoff:
    """Delay n (0-based) is uniform in [0, min(cap, base * 2**n)] ("full jitter").

    Full jitter spreads the retries of many tailers that failed together (one server restart
    fails every workload at once), so they do not come back in lockstep.
    """

    def __init__(
        self,
        base: float = 0.5,
        cap: float = 30.0,
        *,
        rng: random.Random | None = None,
        retry_after_cap: float = 300.0,
        retry_after_spread: float = 0.1,
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.rng = rng if rng is not None else random.Random()
        self.retry_after_cap = retry_after_cap
        self.retry_after_spread = retry_after_spread
        self.failures = 0

    def reset(self) -> None:
        """A success: the next failure starts again from `base`."""
        self.failures = 0

    def ceiling(self) -> float:
        """Upper bound of the next jittered delay."""
        return min(self.cap, self.base * (1 << min(self.failures, 62)))  # 2 ** n, as an int

    def next(self, retry_after: float | None = None, floor: float = 0.0) -> float:
        """The pause before the next attempt; counts one more failure.

        With a Retry-After the pause is max(retry_after, jittered backoff): the server's value is a
        floor (coming back earlier is pointless and rude), while the growing backoff still applies
        when the server keeps refusing with short values. Retry-After gets a small spread on top
        so tailers told the same value do not return together, and is capped so a bogus HTTP-date
        cannot stall a tailer for hours. `floor` is for errors that need a person (bad token,
        unknown workload): retrying those fast only fills the logs.
        """
        delay = self.rng.uniform(0.0, self.ceiling())
        self.failures += 1
        if retry_after is not None and retry_after > 0:
            ra = min(retry_after, self.retry_after_cap)
            ra *= 1.0 + self.retry_after_spread * self.rng.random()
            delay = max(delay, ra)
        return max(delay, floor)
