"""Group commit: a webhook delivery is answered 2xx only once a checkpoint that covers it is
durable, and deliveries that arrive together share one checkpoint.

Why: the platform never redelivers a delivery it got a 2xx for (platform.md 2b). A 2xx sent
before a checkpoint holds the event loses the event to a crash: the restarted exporter resumes
from an older checkpoint, and nobody sends the event again.

Every save of the process goes through here (the scrape's, the periodic one, the one at
shutdown, and those begun for waiting deliveries), so each has a number, in the order taken. A
save covers everything applied before it was taken (`Checkpointer.begin_save` takes the changes
on the loop, with no await). A delivery, once applied, waits for the first save taken after it
(`covered`): when no save is in flight, one is begun at once (at the loop's next pass, so that
deliveries applied in the same pass share it); when one is in flight, it was taken before the
delivery and does not cover it, so the delivery waits for it to be written, and then one save
is begun for every delivery that arrived meanwhile. A save taken by a scrape or the periodic
checkpoint after the delivery was applied covers it as well: no second save is begun then.

Saves are written in the order taken, in the checkpointer's one writer thread. When one fails,
the store keeps what it took and folds it into the next write, so a later save that succeeds
holds it. The outcome of each save is still settled here in the order taken, and a failed save
fails the saves taken after it and before its failure was seen, as well as itself: those are
answered as not durable although the fold may have made them so, which costs a redelivery
(the platform redelivers on the retryable error; a redelivery is a duplicate, answered once
the next save is durable) and never an acknowledgement of what a crash could lose. A save
taken straight on the Checkpointer would be a hole in this account: in `serve` every save goes
through `GroupCommit.begin_save` or `GroupCommit.save`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError

_Outcome = bool | CheckpointError  # whether something was written, or why nothing was


class GroupCommit:
    """Numbers every save of `checkpointer` and tells each waiting delivery when one that
    covers it is durable. Used on the event loop only."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer
        self._taken = 0  # the number of the last save taken
        self._settled = 0  # saves are settled in order: every one up to this number is
        self._lost_through = 0  # saves up to this number lack a failed save's changes
        self._last: asyncio.Task[_Outcome] | None = None  # settles the last save taken
        self._waiters: deque[tuple[int, asyncio.Future[bool]]] = deque()  # (save needed, answer)
        self._begin_soon: asyncio.Handle | None = None
        self.begun = 0  # saves begun for waiting deliveries (the benchmark shows the grouping)

    @property
    def taken(self) -> int:
        """How many saves were taken so far."""
        return self._taken

    # -- saves ---------------------------------------------------------------------------------

    def begin_save(self) -> Callable[[], Awaitable[bool]]:
        """`Checkpointer.begin_save`, numbered: same meaning, same errors, and one more: a save
        written over the changes of a failed one raises CheckpointError too (a scrape then
        fails instead of exposing counts the store may not hold after a crash)."""
        try:
            durable = self.checkpointer.begin_save()
        except CheckpointError as e:
            self._record(_done(e), seen=True)
            raise
        task = self._record(durable())

        async def wait() -> bool:
            # Shielded: a caller that stops waiting leaves the settling of the save to others.
            outcome = await asyncio.shield(task)
            if isinstance(outcome, CheckpointError):
                raise outcome
            return outcome

        return wait

    async def take_ahead(self) -> None:
        """`Checkpointer.take_ahead`: a whole save that is due, taken in slices before the save
        that completes it (which this numbers as any other)."""
        await self.checkpointer.take_ahead()

    def failed(self, e: BaseException) -> CheckpointError:
        """`Checkpointer.failed`: an exception around a save, counted as a failed save."""
        return self.checkpointer.failed(e)

    def save(self) -> bool:
        """`Checkpointer.save` (synchronous, at shutdown), numbered: same meaning and errors."""
        try:
            written = self.checkpointer.save()
        except CheckpointError as e:
            self._record(_done(e), seen=True)
            raise
        self._record(_done(written))
        return written

    def _record(self, outcome: Awaitable[_Outcome], seen: bool = False,
                ) -> asyncio.Task[_Outcome]:
        """Number the save just taken; its outcome is settled after every earlier save's.
        `seen`: the checkpointer already saw how it ended (a failure is seen as it is taken)."""
        self._taken += 1
        task = asyncio.ensure_future(self._settle(self._taken, outcome, self._last, seen))
        self._last = task
        return task

    async def _settle(self, n: int, outcome: Awaitable[_Outcome],
                      before: asyncio.Task[_Outcome] | None, seen: bool) -> _Outcome:
        try:
            result = await outcome
        except CheckpointError as e:
            result = e
        # The saves after this one taken up to now were taken before the failure was seen (the
        # checkpointer saw it in the await just ended): none of them holds this save's changes.
        lost_through = 0
        if isinstance(result, CheckpointError):
            lost_through = n if seen else self._taken
        if before is not None and not before.done():
            await asyncio.wait((before,))
        self._settled = n
        self._lost_through = max(self._lost_through, lost_through)
        durable = not isinstance(result, CheckpointError) and n > self._lost_through
        if not durable and not isinstance(result, CheckpointError):
            # Written, but over a store without a failed save's changes: what it covers (a
            # scrape's exposition too) is not durable until the next save, written whole.
            result = CheckpointError("checkpoint not durable: an earlier one failed while it "
                                     "was queued")
        waiters = self._waiters
        while waiters and waiters[0][0] <= n:
            answer = waiters.popleft()[1]
            if not answer.done():  # its delivery may have gone (the client hung up)
                answer.set_result(durable)
        self._begin_if_needed()
        return result

    # -- deliveries ----------------------------------------------------------------------------

    async def covered(self) -> bool:
        """Wait until a save that covers everything applied so far is durable: True; False when
        that save failed (the delivery must not be acknowledged). Call it right after applying,
        with no await in between."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        self._waiters.append((self._taken + 1, answer))
        if self._settled == self._taken and self._begin_soon is None:
            self._begin_soon = loop.call_soon(self._begin_if_needed)
        return await answer

    def _begin_if_needed(self) -> None:
        """Begin a save for the waiting deliveries that no save taken so far covers, unless a
        save is in flight (they share the one begun once it is settled)."""
        self._begin_soon = None
        if not self._waiters or self._waiters[-1][0] <= self._taken:
            return
        if self._settled < self._taken:
            return
        self.begun += 1
        # A save that cannot even be taken is recorded as failed: its waiters are answered so.
        with contextlib.suppress(CheckpointError):
            self.begin_save()


async def _done(outcome: _Outcome) -> _Outcome:
    return outcome
