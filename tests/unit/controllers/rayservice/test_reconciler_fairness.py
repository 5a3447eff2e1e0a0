"""One slow dashboard does not hold the shared workers: it is polled less often.

A head answering valid, always-changing data in 1.9 s kept its poll at 2 s and held the
only worker most of the time. The next poll now comes no sooner than
``slow_dashboard_factor`` times what the pass took.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controllers.rayservice import reconciler as reconciler_
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env


def slow(env: Env, name: str, seconds: float) -> None:
    fake = env.fake(name)
    answer = fake.get_serve_applications

    async def get() -> Any:
        await asyncio.sleep(seconds)
        return await answer()

    fake.get_serve_applications = get  # type: ignore[method-assign]


async def test_a_slow_dashboard_is_polled_no_sooner_than_four_times_its_answer(env: Env) -> None:
    name = await env.converge_first_cluster()
    fast = await env.reconcile()
    assert fast.requeue_after is not None
    assert fast.requeue_after <= env.reconciler.options.serve_poll_max
    slow(env, name, 0.8)
    env.fake(name).set_all("DEPLOYING")  # changing data: the poll would return to 2 s
    result = await env.reconcile()
    assert result.requeue_after is not None
    assert result.requeue_after >= 4 * 0.8  # not the 2 s poll


async def test_the_factor_is_an_option_and_zero_turns_it_off(env: Env) -> None:
    env.reconciler.options = reconciler_.Options(address_mode="pod-ip", slow_dashboard_factor=0)
    name = await env.converge_first_cluster()
    slow(env, name, 0.3)
    env.fake(name).set_all("DEPLOYING")
    result = await env.reconcile()
    assert result.requeue_after == env.reconciler.options.serve_poll_interval
    with pytest.raises(ValueError, match="slow_dashboard_factor"):
        reconciler_.Options(slow_dashboard_factor=-1)
    await env.synced()
