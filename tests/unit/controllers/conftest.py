"""``env``: a started :class:`~tests.unit.controllers.rayservice.scenario.Env`; its dashboards
are addressed by pod IP unless the test is marked ``address_mode("service")`` (or another
mode)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from controllers.rayservice import reconciler as reconciler_
from tests.unit.controllers.rayservice import scenario


@pytest.fixture
async def env(request: pytest.FixtureRequest) -> AsyncIterator[scenario.Env]:
    environment = scenario.Env()
    mode = request.node.get_closest_marker("address_mode")
    if mode is not None:
        environment.reconciler.options = reconciler_.Options(address_mode=mode.args[0])
    await environment.cache.start()
    try:
        yield environment
    finally:
        await environment.cache.stop()
