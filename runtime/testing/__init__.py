"""Test kit for reconcilers written on :mod:`runtime`.

- :mod:`runtime.testing.clock`: :class:`~runtime.testing.clock.FakeClock`, time you
  advance by hand, accepted by every queue and rate limiter.
- :mod:`runtime.testing.fake`: :class:`~runtime.testing.fake.FakeClient`, an
  in-memory API server with kube-apiserver's versioning, conflict and status rules.
- :mod:`runtime.testing.controlplane`: a real etcd + kube-apiserver (and more) on
  loopback, from your binaries, envtest's ``$KUBEBUILDER_ASSETS`` or the assets cache.
- :mod:`runtime.testing.assets`: ``python -m runtime.testing.assets`` builds those
  binaries from the Go module proxy (Go >= 1.26) into a per-user cache the harness
  finds by itself.
- :mod:`runtime.testing.runner`: a :class:`~runtime.manager.Manager` running in the
  background of a test (``async with running(manager)``), its logs recorded.
- :mod:`runtime.testing.waiting`: :func:`eventually`, a probe polled until it answers,
  failing with its last reason (also ``runtime.testing.eventually``).
- :mod:`runtime.testing.pytest_plugin`: pytest fixtures for all of the above
  (``kube_control_plane``, ``kube_namespace``, ``kube_client``, ``fake_kube_client``,
  ``kube_manager``), loaded through the ``pytest11`` entry point.

Submodules are imported explicitly (``from runtime.testing import clock``); this
package imports nothing heavy on its own.
"""

from runtime.testing import waiting

__all__ = ["eventually"]

eventually = waiting.eventually
