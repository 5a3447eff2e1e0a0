"""``env``: a started :class:`~tests.unit.controllers.rayservice.scenario.Env`; its dashboards
are addressed by pod IP unless the test is marked ``address_mode("service")`` (or another
mode); its API server serves the Gateway API when the test is marked ``gateway_api``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from controllers.rayservice import reconciler as reconciler_
from tests.unit.controllers.rayservice import scenario


@pytest.fixture
async def env(request: pytest.FixtureRequest) -> AsyncIterator[scenario.Env]:
    gateway_api = request.node.get_closest_marker("gateway_api") is not None
    environment = scenario.Env(gateway_api=gateway_api)
    mode = request.node.get_closest_marker("address_mode")
    if mode is not None:
        environment.reconciler.options = reconciler_.Options(
            address_mode=mode.args[0],
            gateway_api=gateway_api,
            gateway_classes=scenario.GATEWAY_CLASSES,
        )
    await environment.cache.start()
    try:
        yield environment
    finally:
        await environment.cache.stop()
