"""Ray Serve applications for tests/integration/test_realray.py, imported by real Ray.

The harness puts this directory on the pods' ``PYTHONPATH`` (as an image would bake the
module in). Each answer names the pod that served it (``socket.gethostname()`` is the
pod's hostname in the harness's UTS namespace), so a test can tell heads and nodes apart.
Only Ray's own venv imports this module; the project never does.
"""

import socket

from ray import serve


@serve.deployment
class Greeter:
    """``GET /<route>`` -> ``"<greeting> from <pod hostname>"``; one replica, one CPU."""

    def __init__(self, greeting: str = "hello") -> None:
        self.greeting = greeting

    async def __call__(self, request: object) -> str:
        return f"{self.greeting} from {socket.gethostname()}"


@serve.deployment
class Echo:
    """``GET /<route>/<path>`` -> ``"echo <path> from <pod hostname>"``; one CPU."""

    async def __call__(self, request: object) -> str:
        path = getattr(request, "url").path  # noqa: B009 - a starlette Request
        return f"echo {path} from {socket.gethostname()}"


def greeter(args: dict[str, str]) -> serve.Application:
    """An application builder: ``args`` from the Serve config (``greeting``)."""
    return Greeter.bind(args.get("greeting", "hello"))


echo = Echo.bind()
