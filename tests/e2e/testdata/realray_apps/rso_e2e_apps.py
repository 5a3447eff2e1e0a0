"""A Ray Serve application for tests/e2e/test_realray.py, imported by real Ray.

The harness (tests/support/realray) puts this directory on the pods' ``PYTHONPATH``, as an image
would bake the module in. The answer is the same on every cluster (the traffic client
compares bodies exactly, and an upgrade moves it from one cluster to another) and is one
the Ray simulator never gives (it answers an application's name): a request answered
with it was served by real Ray. Only Ray's own venv imports this module.
"""

import ray
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Greeter:
    """``GET /<route>`` -> ``"<greeting> from Ray <version>"``; one replica."""

    def __init__(self, greeting: str = "hello") -> None:
        self.answer = f"{greeting} from Ray {ray.__version__}"

    async def __call__(self, request: object) -> str:
        return self.answer


def greeter(args: dict[str, str]) -> serve.Application:
    """An application builder: ``args`` from the Serve config (``greeting``)."""
    return Greeter.bind(args.get("greeting", "hello"))
