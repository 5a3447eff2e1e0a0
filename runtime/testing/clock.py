"""A clock for tests: time stands still until you advance it.

:class:`FakeClock` satisfies :class:`runtime.clock.Clock`. Timers registered with
``call_later`` fire, in due-time order, inside :meth:`FakeClock.advance` (or
:meth:`FakeClock.set`) when the fake time reaches them; nothing ever sleeps.

>>> from runtime.testing.clock import FakeClock
>>> clock = FakeClock()
>>> fired = []
>>> _ = clock.call_later(2.0, lambda: fired.append(clock.now()))
>>> clock.advance(1.0); fired
[]
>>> clock.advance(1.0); fired
[2.0]
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

__all__ = ["FakeClock"]


class _Timer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Manual time, starting at ``start`` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + max(delay, 0.0), callback)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing every timer that comes due."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards (advance({seconds}))")
        self.set(self._now + seconds)

    def set(self, when: float) -> None:
        """Move time forward to ``when``, firing due timers in order.

        Each timer sees ``now()`` equal to its own due time, so callbacks that
        schedule further timers observe consistent time.
        """
        if when < self._now:
            raise ValueError(f"cannot move a clock backwards ({self._now} -> {when})")
        while self._timers and self._timers[0][0] <= when:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.callback()
        self._now = when

    @property
    def pending_timers(self) -> int:
        """Timers scheduled and not cancelled."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)
