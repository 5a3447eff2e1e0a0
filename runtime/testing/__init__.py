"""Test kit for reconcilers written on :mod:`runtime`.

- :mod:`runtime.testing.clock`: :class:`~runtime.testing.clock.FakeClock`, time you
  advance by hand, accepted by every queue and rate limiter.

Submodules are imported explicitly (``from runtime.testing import clock``); this
package imports nothing heavy on its own.
"""

__all__: list[str] = []
