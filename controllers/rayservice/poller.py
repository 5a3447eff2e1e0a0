"""Serve polled off the worker while a deploy is pending: a pass only when Serve changed.

A RayService whose target cluster is deploying its Serve applications (a config was
just submitted, or some application is not ``RUNNING`` yet) needs the dashboard read
every few seconds, but nearly every read says what the last one said. Read by passes,
each such read holds one of the controller's workers for a round trip through the API
server's proxy, and at a few hundred services the readiness of one waits behind the
unchanged polls of all the others. The :class:`Poller` reads instead, outside the work
queue, and asks for a pass only when the answer differs.

Contract:

- :meth:`Poller.watch` ``(request, client, seen, interval)``: from now, every
  ``interval`` seconds, the Serve applications are read with ``client``; when what is
  read differs from ``seen`` (:func:`fingerprint` of what the pass read), or the read
  fails, ``request`` is sent to :attr:`Poller.channel` (the controller's source) and the
  watch ends. At most ``concurrency`` reads are in flight over all RayServices.
- One watch per request: a newer :meth:`watch` replaces it; :meth:`stop` ends it (every
  pass starts with it: the pass reads the dashboard itself and decides again).
- The poller's answer is a trigger, not an input: the pass reads Serve again (one read
  more per change, none per unchanged poll).
- :meth:`close` ends every watch and waits for them (the manager's shutdown).

>>> import asyncio
>>> from controllers.ray import serve
>>> from runtime import reconcile
>>> class Head:  # DEPLOYING twice, then RUNNING
...     reads = 0
...     async def get_serve_applications(self):
...         self.reads += 1
...         status = "RUNNING" if self.reads >= 3 else "DEPLOYING"
...         return serve.ServeDetails.model_validate({"applications": {"a": {"status": status}}})
>>> class Queue:
...     def __init__(self): self.added = asyncio.Queue()
...     def add(self, request): self.added.put_nowait(request)
>>> async def demo():
...     poller, head, queue = Poller(), Head(), Queue()
...     await poller.channel.start(queue)
...     seen = fingerprint(await head.get_serve_applications())  # read 1, by the pass
...     poller.watch(reconcile.Request("ns", "svc"), head, seen, interval=0.01)
...     request = await queue.added.get()  # read 2 was the same; read 3 differs
...     await poller.close()
...     return str(request), head.reads
>>> asyncio.run(demo())
('ns/svc', 3)
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from controllers.ray import dashboard, serve
from controllers.rayservice import report
from runtime import reconcile, source

__all__ = ["CONCURRENCY", "Poller", "fingerprint"]

CONCURRENCY = 16
"""Dashboard reads in flight at once, over all RayServices, by default."""


def fingerprint(details: serve.ServeDetails) -> Any:
    """What a pass decides from in a Serve answer: the applications as the status
    reports them (statuses and messages) and Serve's ``target_capacity``.

    >>> one = serve.ServeDetails.model_validate({"applications": {"a": {"status": "RUNNING"}}})
    >>> two = serve.ServeDetails.model_validate({"applications": {"a": {"status": "DEPLOYING"}}})
    >>> fingerprint(one) == fingerprint(one), fingerprint(one) == fingerprint(two)
    (True, False)
    """
    return (report.applications(details), details.target_capacity)


class Poller:
    """Serve reads for RayServices whose deploy is pending (see the module docstring)."""

    def __init__(self, *, concurrency: int = CONCURRENCY) -> None:
        if concurrency < 1:
            raise ValueError(f"need concurrency >= 1, got {concurrency}")
        self.channel = source.Channel()
        """The controller's source of the passes the poller asks for."""
        self._reads = asyncio.Semaphore(concurrency)
        self._watches: dict[reconcile.Request, asyncio.Task[None]] = {}

    @property
    def watching(self) -> int:
        """How many RayServices are being polled."""
        return len(self._watches)

    def watch(
        self,
        request: reconcile.Request,
        client: dashboard.DashboardClient,
        seen: Any,
        *,
        interval: float,
    ) -> None:
        """Poll for ``request`` until Serve's answer differs from ``seen``."""
        self.stop(request)
        task = asyncio.get_running_loop().create_task(
            self._poll(request, client, seen, interval), name=f"serve-poll {request}"
        )
        self._watches[request] = task

    def stop(self, request: reconcile.Request) -> None:
        """End ``request``'s watch, if it has one."""
        task = self._watches.pop(request, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        """End every watch and wait until they have ended."""
        tasks = list(self._watches.values())
        self._watches.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- a runnable of the manager: every watch ends when it stops --------------------------

    needs_leader_election = False

    async def start(self, stop: asyncio.Event) -> None:
        """Wait for ``stop``, then :meth:`close` (so a stopping manager leaves no task)."""
        try:
            await stop.wait()
        finally:
            await self.close()

    async def _poll(
        self,
        request: reconcile.Request,
        client: dashboard.DashboardClient,
        seen: Any,
        interval: float,
    ) -> None:
        try:
            while True:
                await asyncio.sleep(interval)
                async with self._reads:
                    try:
                        details = await client.get_serve_applications()
                    except Exception:  # the pass reads it again and reports it
                        break
                if fingerprint(details) != seen:
                    break
        finally:  # however it ends, it is no longer this request's watch (unless replaced)
            if self._watches.get(request) is asyncio.current_task():
                del self._watches[request]
        self.channel.send(request)
