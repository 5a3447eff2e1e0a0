"""Small asyncio helpers shared by the runtime's long-running loops."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["BindError", "cancel_and_wait", "listen", "wait_first", "wait_unless_stopped"]


class BindError(OSError):
    """A server could not listen where it was told to; the message names the server, the
    address and the option that gave it (``errno`` is the socket's; ``str()`` is the
    message alone, without ``[Errno n]``)."""

    def __str__(self) -> str:
        return str(self.strerror)


async def listen(site: Any, server: str, option: str, address: tuple[str, int]) -> None:
    """``await site.start()`` (an aiohttp site), a failure to listen raised as
    :class:`BindError` naming ``server`` (``"the metrics server"``) and ``option``
    (``"ManagerOptions.metrics_bind_address"``)."""
    try:
        await site.start()
    except OSError as exc:
        host, port = address
        reason = exc.strerror or str(exc)
        if exc.errno is not None and "address already in use" in str(exc).lower():
            reason = "address already in use"
        raise BindError(
            exc.errno,
            f"{server} cannot listen on {host}:{port} ({option}): {reason}",
        ) from exc


async def wait_first(*events: asyncio.Event, tasks: Iterable[asyncio.Future[Any]] = ()) -> None:
    """Return as soon as one of ``events`` is set or one of ``tasks`` is done.

    The waiters made for the events are cancelled before returning; ``tasks`` are
    left alone (they belong to the caller).
    """
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait({*waiters, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and return only once every one of them has ended.

    If the caller is cancelled while it waits, the cancellation is passed on to
    the tasks still running (one may have swallowed the first) and re-raised once
    they have all ended: whatever happens, nothing in ``tasks`` runs after this
    returns or raises. Their results and exceptions are left for the caller.
    """
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    interrupted: asyncio.CancelledError | None = None
    while pending:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError as exc:
            interrupted = interrupted or exc
            for task in pending:
                task.cancel()
        pending = {task for task in pending if not task.done()}
    if interrupted is not None:
        raise interrupted


async def wait_unless_stopped(
    work: Coroutine[Any, Any, None], stop: asyncio.Event, within: float, name: str = ""
) -> bool:
    """Run ``work`` until it is done (True) or ``stop`` is set first (False).

    Raises :class:`TimeoutError` if neither happens ``within`` seconds, whatever
    ``work`` raised, and :class:`RuntimeError` if ``work`` ended cancelled (by
    something inside it: a cancellation that is not the caller's must not look like
    one). ``work`` never outlives the call.
    """
    task = asyncio.create_task(work, name=name or None)
    timed_out = False
    try:
        async with asyncio.timeout(within):
            await wait_first(stop, tasks=[task])
    except TimeoutError:
        timed_out = not task.done()
    finally:
        await cancel_and_wait([task])
    if stop.is_set():
        return False
    if timed_out:
        raise TimeoutError(f"not done within {within} s")
    if task.cancelled():
        raise RuntimeError(f"{task.get_name()} was cancelled from within")
    task.result()  # its failure is ours
    return True
