from __future__ import annotations

import datetime

import pytest

from runtime import reconcile


def test_request_is_a_cheap_hashable_key() -> None:
    a = reconcile.Request("ns", "x")
    assert a == reconcile.Request("ns", "x")
    assert len({a, reconcile.Request("ns", "x"), reconcile.Request("other", "x")}) == 2
    assert str(reconcile.Request("", "cluster-scoped")) == "cluster-scoped"


def test_result_accepts_seconds_and_timedelta() -> None:
    assert reconcile.Result(requeue_after=datetime.timedelta(minutes=1)).requeue_after == 60.0
    assert reconcile.Result(requeue_after=2).requeue_after == 2.0
    assert reconcile.Result().requeue_after is None
    assert reconcile.Result(5) == reconcile.Result(datetime.timedelta(seconds=5))


@pytest.mark.parametrize("bad", [0, -1, datetime.timedelta(0), float("nan")])
def test_result_rejects_non_positive_requeue_after(bad: float | datetime.timedelta) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        reconcile.Result(requeue_after=bad)


async def test_func_adapts_an_async_function() -> None:
    async def f(request: reconcile.Request) -> reconcile.Result:
        return reconcile.Result(requeue_after=1)

    adapted = reconcile.Func(f)
    assert isinstance(adapted, reconcile.Reconciler)
    assert await adapted.reconcile(reconcile.Request("a", "b")) == reconcile.Result(1)


def test_terminal_error_is_an_exception_with_a_cause() -> None:
    def fail() -> None:
        try:
            raise KeyError("spec.x")
        except KeyError as exc:
            raise reconcile.TerminalError("bad spec") from exc

    with pytest.raises(reconcile.TerminalError, match="bad spec") as info:
        fail()
    assert isinstance(info.value.__cause__, KeyError)


def test_is_terminal_survives_a_cyclic_cause_chain() -> None:
    a, b = RuntimeError("a"), ValueError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert reconcile.is_terminal(a) is False
    group = ExceptionGroup("g", [a, reconcile.TerminalError("c")])
    b.__cause__ = group  # a -> b -> group -> (a, TerminalError)
    assert reconcile.is_terminal(a) is True
