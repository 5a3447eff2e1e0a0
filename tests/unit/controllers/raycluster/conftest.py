"""``env``: a started :class:`~tests.unit.controllers.raycluster.scenario.Env`; after the test,
the cache is checked: nothing the reconciler did changed a cached object."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.controllers.raycluster import scenario


@pytest.fixture
async def env() -> AsyncIterator[scenario.Env]:
    e = scenario.Env()
    yield e
    e.cache.verify()  # nothing the reconciler did changed a cached object
    await e.cache.stop()
