"""tests/support/raysim: the ``healthy`` fault switch undoes ``unhealthy`` (what
``hack/bench/rayservice.py`` uses to bring an application back to ``RUNNING``)."""

from __future__ import annotations

from tests.support.raysim import inside, serve

IP = "198.18.7.3"


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def status(head: serve.Head, name: str) -> str:
    return str(head.get_applications()["applications"][name]["status"])


def test_make_healthy_undoes_make_unhealthy_and_nothing_else() -> None:
    clock = Clock()
    head = serve.Head(serve.Behaviour(deploy_delay=1.0), clock=clock, ip=IP)
    head.put_applications({"applications": [
        {"name": "a", "import_path": "m.app", "route_prefix": "/a"},
        {"name": "b", "import_path": "m.app", "route_prefix": "/b"},
    ]})  # fmt: skip
    assert head.make_healthy("a") is False  # DEPLOYING
    clock.now += 1.0
    assert head.make_healthy("a") is False  # RUNNING: nothing to undo
    assert head.make_healthy("nope") is False
    assert head.make_unhealthy("a") is True
    assert (status(head, "a"), status(head, "b")) == ("UNHEALTHY", "RUNNING")
    assert head.make_healthy("a") is True
    assert (status(head, "a"), status(head, "b")) == ("RUNNING", "RUNNING")
    app_a = head.get_applications()["applications"]["a"]
    assert app_a["message"] == ""
    assert {d["status"] for d in app_a["deployments"].values()} == {"HEALTHY"}


def test_the_inside_part_flips_both_ways() -> None:
    clock = Clock()
    part = inside.Inside(
        serve.Behaviour(deploy_delay=1.0), {"dashboard": 0, "serve": 0, "agent": 0}, clock=clock
    )
    part.set_pods({IP: "uid-1"})
    head = part.heads[IP].head
    head.put_applications({"applications": [{"name": "a", "import_path": "m.app"}]})
    clock.now += 1.0
    assert part.fault({"ip": IP, "healthy": "a"}) == {"ok": False, "healthy": False}
    assert part.fault({"ip": IP, "unhealthy": "a"}) == {"ok": True, "unhealthy": True}
    assert status(head, "a") == "UNHEALTHY"
    assert part.fault({"ip": IP, "healthy": "a"}) == {"ok": True, "healthy": True}
    assert status(head, "a") == "RUNNING"
    assert part.fault({"ip": "198.18.7.4", "healthy": "a"})["ok"] is False  # no such head
