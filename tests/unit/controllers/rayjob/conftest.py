"""``job_env``: a started :class:`~tests.unit.controllers.rayjob.scenario.Env` (its cache
stopped afterwards); a test marked ``rayjob_options(**fields)`` gets those
:class:`controllers.rayjob.plan.Options`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.controllers.rayjob import scenario


@pytest.fixture
async def job_env(request: pytest.FixtureRequest) -> AsyncIterator[scenario.Env]:
    marker = request.node.get_closest_marker("rayjob_options")
    environment = scenario.Env(**(marker.kwargs if marker is not None else {}))
    await environment.cache.start()
    try:
        yield environment
    finally:
        await environment.recorder.flush()
        await environment.cache.stop()
