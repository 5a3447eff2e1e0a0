"""Small helpers for unit tests."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import pathlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from aiohttp import web
from kubernetes_asyncio import client as k8s

from runtime.client import client as client_
from runtime.testing import waiting

T = TypeVar("T")
ROOT = pathlib.Path(__file__).parents[2]
"""The repository."""
TESTDATA = ROOT / "tests" / "unit" / "testdata"
"""Recorded answers of KubeRay and Ray that several unit tests read."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def eventually(
    condition: Callable[[], T | None], within: float = 5.0, what: str = "the condition"
) -> T:
    """The kit's :func:`runtime.testing.eventually`, polled every millisecond (real time)
    for ``within`` seconds. For what takes real time or only needs the loop to turn; the
    fakes offer exact waits where one exists (``FakeClient.delivered``,
    ``Controller.wait_idle``)."""
    return await waiting.eventually(condition, within=within, interval=0.001, what=what)


@contextlib.asynccontextmanager
async def api_server(handler: Handler) -> AsyncIterator[client_.Client]:
    """An HTTP server on 127.0.0.1 (a free port) answering every request with
    ``handler``, and a :class:`~runtime.client.Client` for it (2 s timeout, no retry
    waits to speak of); both are closed on exit."""
    app = web.Application(client_max_size=4 * 1024 * 1024)  # room for objects near etcd's limit
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    configuration = k8s.Configuration(host=f"http://127.0.0.1:{port}")
    client = client_.Client(configuration, options=client_.Options(timeout=2, retry_max_wait=0.01))
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


def load_script(relative: str) -> ModuleType:
    """Import a script of this repository that is not in a package (``hack/x.py``), once."""
    name = pathlib.Path(relative).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _short(value: Any) -> str:
    return json.dumps(value, default=str)[:300]


def kuberay_diff(want: Any, have: Any, path: str = "") -> Iterator[str]:
    """Where ``have`` (ours) differs from ``want`` (KubeRay's recorded object), one line
    per difference, by path (golden comparisons)."""
    if isinstance(want, dict) and isinstance(have, dict):
        for key in sorted(set(want) | set(have)):
            where = f"{path}.{key}"
            if key not in have:
                yield f"{where}: KubeRay has {_short(want[key])}, we omit it"
            elif key not in want:
                yield f"{where}: we have {_short(have[key])}, KubeRay omits it"
            else:
                yield from kuberay_diff(want[key], have[key], where)
    elif isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        for index, (a, b) in enumerate(zip(want, have, strict=True)):
            yield from kuberay_diff(a, b, f"{path}[{index}]")
    elif want != have:
        yield f"{path}: KubeRay {want!r} != ours {have!r}"
