"""Waiting in tests for what an operator does in the background: :func:`eventually`.

A test of a running operator acts as a user does and then waits for the world to
converge: an object to appear, a condition to turn ``True``. :func:`eventually` polls a
*probe* (a plain or an async function of no arguments) until it gives an answer, and
fails the test with the last reason it had when the deadline passes:

- a probe **answers** when it returns a truthy value, which :func:`eventually` returns;
- it is **not there yet** when it returns a falsy value (``None``, ``False``, ``[]``) or
  raises one of ``retry_on``: :class:`AssertionError` (so a probe may ``assert``) and
  :class:`runtime.client.NotFound` (so it may ``get`` what is not created yet);
- any other exception is a broken probe, raised at once, not retried for ``within``
  seconds.

At the deadline it raises :class:`AssertionError` saying what it waited for (``what``,
else the probe's docstring or name), how long, and the last falsy value or exception
(chained as ``__cause__``, so its traceback is in the report). An assertion-style probe
that returns nothing ends with ``return True``.

>>> import asyncio
>>> answers = iter([None, None, {"status": "Ready"}])
>>> asyncio.run(eventually(lambda: next(answers), interval=0))
{'status': 'Ready'}
>>> def never() -> None:
...     assert 1 + 1 == 3, "arithmetic"
>>> try:
...     asyncio.run(eventually(never, within=0.05, interval=0.01))
... except AssertionError as failed:
...     print(failed)
not within 0.05 s: never; last: AssertionError('arithmetic')
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["eventually"]

T = TypeVar("T")


def _default_retry_on() -> tuple[type[BaseException], ...]:
    from runtime.client import errors  # the client loads aiohttp: not on a bare import

    return (AssertionError, errors.NotFound)


@overload
async def eventually(  # an async probe (or one returning an awaitable) first
    probe: Callable[[], Awaitable[T | None]],
    *,
    within: float = ...,
    interval: float = ...,
    what: str | None = ...,
    retry_on: tuple[type[BaseException], ...] | None = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None],
    *,
    within: float = ...,
    interval: float = ...,
    what: str | None = ...,
    retry_on: tuple[type[BaseException], ...] | None = ...,
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    *,
    within: float = 10.0,
    interval: float = 0.05,
    what: str | None = None,
    retry_on: tuple[type[BaseException], ...] | None = None,
) -> Any:
    """The first truthy answer of ``probe()`` (awaited if it is awaitable), polled every
    ``interval`` seconds for at most ``within`` seconds; see the module docstring."""
    retried = _default_retry_on() if retry_on is None else retry_on
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        last: BaseException | None = None
        value: Any = None
        try:
            answer = probe()
            if inspect.isawaitable(answer):
                answer = await answer
            value = answer
        except retried as exc:
            last = exc
        if last is None and value:
            return value
        if loop.time() >= deadline:
            name = what or (probe.__doc__ or "").strip() or getattr(probe, "__name__", repr(probe))
            reason = repr(last) if last is not None else repr(value)
            raise AssertionError(f"not within {within} s: {name}; last: {reason}") from last
        await asyncio.sleep(interval)
