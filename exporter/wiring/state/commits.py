"""Group commit: a webhook delivery is answered 2xx only once a checkpoint that covers it is
durable, and deliveries that arrive together share one checkpoint.

Why: the platform never redelivers a delivery it got a 2xx for (platform.md 2b). A 2xx sent
before a checkpoint holds the event loses the event to a crash: the restarted exporter resumes
from an older checkpoint, and nobody sends the event again.

Every save of the process goes through here (the scrape's, the periodic one, the one at
shutdown, and those begun for waiting deliveries), so each has a number, in the order taken. A
save covers everything applied before it was taken (`Checkpointer.begin_write` takes the changes
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

One hop: a scrape waits on the loop for its write, which other work queued on the loop (the
tailers' pages) delays at every hop back to it. So the writer thread's completion schedules one
callback (`_settle`), which settles every save written so far and answers each waiter's future
itself, with no task or shield in between; and from the completion until that callback has run,
`gate()` asks the tailers to let the waiters resume before they apply their next page.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from exporter.wiring.state.checkpoint import CheckpointError

_Outcome = bool | CheckpointError  # whether something was written, or why nothing was


class WritesSaves(Protocol):
    """What the group commit numbers: a `Checkpointer` (tests stand in for it)."""

    def begin_write(self, on_done: Callable[[], None]) -> Callable[[], bool]: ...

    def save(self) -> bool: ...

    async def take_ahead(self) -> None: ...

    def failed(self, e: BaseException) -> CheckpointError: ...


class _Save:
    """One numbered save: how it ends (`finish`, once written), and who waits for it."""

    __slots__ = ("done", "ended_at", "finish", "n", "outcome", "seen", "settled_at", "taken_at",
                 "waiting")

    def __init__(self, n: int, finish: Callable[[], bool] | None, outcome: _Outcome | None,
                 seen: bool) -> None:
        self.n = n
        self.finish = finish
        self.done = outcome is not None  # set by the writer thread once written
        self.seen = seen  # the checkpointer saw how it ended as it was taken
        self.outcome = outcome  # settled: durable (bool) or why not
        self.waiting: list[asyncio.Future[bool]] = []
        # perf_counter: taken on the loop, written in the writer thread, settled on the loop
        self.taken_at = self.ended_at = self.settled_at = 0.0

    def wait(self) -> Awaitable[bool]:
        if self.outcome is not None:
            return _answer(self.outcome)
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.append(answer)
        return answer


class GroupCommit:
    """Numbers every save of `checkpointer` and tells each waiting delivery when one that
    covers it is durable. Used on the event loop only (but for the writer's completion)."""

    def __init__(self, checkpointer: WritesSaves) -> None:
        self.checkpointer = checkpointer
        self._taken = 0  # the number of the last save taken
        self._settled = 0  # saves are settled in order: every one up to this number is
        self._lost_through = 0  # saves up to this number lack a failed save's changes
        self._flight: deque[_Save] = deque()  # taken, not settled yet, in order
        self._waiters: deque[tuple[int, asyncio.Future[bool]]] = deque()  # (save needed, answer)
        self._begin_soon: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gated: list[asyncio.Future[None]] = []  # tailers' pages, after the settling
        self.written = False  # a write ended and is not settled yet (set by the writer thread)
        self.begun = 0  # saves begun for waiting deliveries (the benchmark shows the grouping)
        self.last_taken = time.monotonic()  # when the last save was taken (the periodic one's due)
        # The last wait's save: taken, written, settled, and the waiter resumed (perf_counter;
        # a scrape reads it in its Server-Timing header).
        self.hops: tuple[float, float, float, float] | None = None

    @property
    def taken(self) -> int:
        """How many saves were taken so far."""
        return self._taken

    # -- saves ---------------------------------------------------------------------------------

    def begin_save(self) -> Callable[[], Awaitable[bool]]:
        """`Checkpointer.begin_save`, numbered: same meaning, same errors, and one more: a save
        written over the changes of a failed one raises CheckpointError too (a scrape then
        fails instead of exposing counts the store may not hold after a crash). Waiting costs
        one hop back to the loop once the write ends."""
        loop = self._loop = asyncio.get_running_loop()
        save = _Save(self._taken + 1, None, None, seen=False)

        def on_done() -> None:  # in the writer thread
            save.ended_at = time.perf_counter()
            save.done = True
            self.written = True
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
                loop.call_soon_threadsafe(self._settle)

        try:
            save.finish = self.checkpointer.begin_write(on_done)
        except CheckpointError as e:
            self._record(_Save(save.n, None, e, seen=True))
            raise
        save.taken_at = time.perf_counter()
        self._record(save)

        async def wait() -> bool:
            try:
                return await save.wait()
            finally:
                self.hops = (save.taken_at, save.ended_at, save.settled_at,
                             time.perf_counter())

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
        n = self._taken + 1
        try:
            written = self.checkpointer.save()
        except CheckpointError as e:
            self._record(_Save(n, None, e, seen=True))
            raise
        self._record(_Save(n, None, written, seen=False))
        return written

    def gate(self) -> asyncio.Future[None] | None:
        """For a tailer about to apply a page: None, or (a write ended and the saves it settles
        have not been yet) a future of its own, done once their waiters are answered, so that
        their resumption is queued ahead of the page."""
        if not self.written or self._loop is None:
            return None
        gated: asyncio.Future[None] = self._loop.create_future()
        self._gated.append(gated)
        return gated

    def _record(self, save: _Save) -> None:
        """Number the save just taken; its outcome is settled after every earlier save's."""
        self._taken = save.n
        self.last_taken = time.monotonic()
        self._flight.append(save)
        if save.done and self._flight[0] is save:
            self._settle()

    def _settle(self) -> None:
        """Settle, in order, every save whose write ended; answer whoever waits for them."""
        self.written = False
        now = time.perf_counter()
        flight = self._flight
        while flight:
            save = flight[0]
            if not save.done:
                break  # still in the writer: its completion schedules this again
            if save.finish is not None:
                try:
                    save.outcome = save.finish()
                except CheckpointError as e:
                    save.outcome = e
                except Exception as e:  # counted as a failed save, never a dead callback
                    save.outcome = self.checkpointer.failed(e)
                save.finish = None
            flight.popleft()
            save.settled_at = now
            self._settle_one(save)
        gated, self._gated = self._gated, []
        for page in gated:  # after the answers: the waiters resume first
            if not page.done():
                page.set_result(None)
        self._begin_if_needed()

    def _settle_one(self, save: _Save) -> None:
        n, result = save.n, save.outcome
        assert result is not None
        # The saves after this one taken up to now were taken before the failure was seen (the
        # checkpointer saw it as it was settled just now): none of them holds its changes.
        if isinstance(result, CheckpointError):
            self._lost_through = max(self._lost_through, n if save.seen else self._taken)
        self._settled = n
        durable = not isinstance(result, CheckpointError) and n > self._lost_through
        if not durable and not isinstance(result, CheckpointError):
            # Written, but over a store without a failed save's changes: what it covers (a
            # scrape's exposition too) is not durable until the next save, written whole.
            result = CheckpointError("checkpoint not durable: an earlier one failed while it "
                                     "was queued")
        save.outcome = result
        for answer in save.waiting:
            if not answer.done():  # its scrape may have gone (the client hung up)
                if isinstance(result, CheckpointError):
                    answer.set_exception(result)
                else:
                    answer.set_result(result)
        save.waiting.clear()
        waiters = self._waiters
        while waiters and waiters[0][0] <= n:
            answer = waiters.popleft()[1]
            if not answer.done():  # its delivery may have gone (the client hung up)
                answer.set_result(durable)

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


async def _answer(outcome: _Outcome) -> bool:
    if isinstance(outcome, CheckpointError):
        raise outcome
    return outcome
