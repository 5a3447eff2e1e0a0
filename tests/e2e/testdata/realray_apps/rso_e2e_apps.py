"""Ray Serve applications for the e2e suite with real Ray, imported by real Ray:
``greeter`` for tests/e2e/test_realray.py, ``named`` for an external cluster
(tests/e2e/realpods.py).

The harness (tests/support/realray) puts this directory on the pods' ``PYTHONPATH``, as an image
would bake the module in; on an external cluster it comes in a ConfigMap mounted into the
Ray containers. ``greeter``'s answer is the same on every cluster (the traffic client
compares bodies exactly, and an upgrade moves it from one cluster to another) and is one
the Ray simulator never gives (it answers an application's name): a request answered
with it was served by real Ray. Only Ray's own Python imports this module.
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


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Named:
    """``GET /<route>/...`` -> the application's name, as the Ray simulator answers; one replica.
    What the sample's applications become when a real kubelet runs the pods
    (:mod:`tests.e2e.realpods`): the traffic client's expectations stay the same."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def __call__(self, request: object) -> str:
        return self.name


def named(args: dict[str, str]) -> serve.Application:
    """An application builder: ``args`` from the Serve config (``name``)."""
    return Named.bind(args["name"])
