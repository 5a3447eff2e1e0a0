"""runtime.testing.eventually: what counts as an answer, what is retried, what is raised
at once, and what the failure says."""

from __future__ import annotations

import pytest

import runtime
from runtime.testing import waiting


async def test_it_returns_the_first_truthy_answer_of_a_plain_or_async_probe() -> None:
    calls: list[int] = []

    async def probe() -> dict[str, str] | None:
        calls.append(1)
        return {"phase": "Ready"} if len(calls) == 3 else None

    assert await runtime.testing.eventually(probe, interval=0) == {"phase": "Ready"}
    assert len(calls) == 3
    answers = iter([[], False, 0, "yes"])
    assert await waiting.eventually(lambda: next(answers), interval=0) == "yes"


async def test_assertions_and_not_found_are_not_there_yet() -> None:
    tries: list[int] = []

    def probe() -> bool:
        tries.append(1)
        if len(tries) == 1:
            raise runtime.client.NotFound("configmaps", "ns", "a")
        assert len(tries) > 2, "not yet"
        return True

    assert await waiting.eventually(probe, interval=0) is True
    assert len(tries) == 3


async def test_any_other_exception_is_raised_at_once() -> None:
    tries: list[int] = []

    def broken() -> None:
        tries.append(1)
        raise KeyError("status")

    with pytest.raises(KeyError):
        await waiting.eventually(broken, within=5, interval=0)
    assert tries == [1]


async def test_the_failure_says_what_how_long_and_the_last_reason() -> None:
    def probe() -> None:
        """the mirror exists"""
        raise AssertionError("no mirror")

    with pytest.raises(AssertionError) as failed:
        await waiting.eventually(probe, within=0.05, interval=0.01)
    last = "last: AssertionError('no mirror')"
    assert str(failed.value) == f"not within 0.05 s: the mirror exists; {last}"
    assert isinstance(failed.value.__cause__, AssertionError)

    with pytest.raises(AssertionError, match=r"not within 0.02 s: a pod; last: \[\]$") as empty:
        await waiting.eventually(lambda: [], within=0.02, interval=0.01, what="a pod")
    assert empty.value.__cause__ is None


async def test_retry_on_replaces_the_default() -> None:
    def probe() -> None:
        raise runtime.client.NotFound("configmaps", "ns", "a")

    with pytest.raises(runtime.client.NotFound):
        await waiting.eventually(probe, within=1, interval=0, retry_on=(AssertionError,))

    def slow() -> None:
        raise TimeoutError

    with pytest.raises(AssertionError, match="last: TimeoutError"):
        await waiting.eventually(slow, within=0.02, interval=0.01, retry_on=(TimeoutError,))
