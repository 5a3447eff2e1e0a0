"""tests/support/raysim/host.py and the inside part's own guard: which pods are live heads, and the
refusals (routes that do not go into the pod namespace; a namespace with a default route)."""

from __future__ import annotations

import doctest
import pathlib

import pytest

from tests.support.raysim import host, inside

CIDR = "198.18.0.0/20"


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(host)  # inside.py has no examples: test_inside.py tests it
    assert result.attempted > 0, "host.py lost its examples"
    assert result.failed == 0


def pod(uid: str, ip: str | None, *, phase: str = "Running", created: str = "2026-01-01T00:00:00Z",
        deleting: bool = False, kind: str = "head", cluster: str = "c",
        namespace: str = "ns") -> dict[str, object]:  # fmt: skip
    meta: dict[str, object] = {
        "uid": uid, "creationTimestamp": created, "namespace": namespace,
        "labels": {"ray.io/node-type": kind, "ray.io/cluster": cluster},
    }  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status: dict[str, object] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_only_running_pods_with_an_ip_in_the_cidr_and_not_terminating_are_live() -> None:
    pods = {
        "ns/live": pod("u1", "198.18.1.1"),
        "ns/pending": pod("u2", "198.18.1.2", phase="Pending"),
        "ns/no-ip": pod("u3", None),
        "ns/going": pod("u4", "198.18.1.4", deleting=True),
        "ns/outside": pod("u5", "203.0.113.5"),
        "ns/garbage": pod("u6", "not-an-ip"),
    }
    assert host.live_heads(pods, CIDR) == {"198.18.1.1": "u1"}


def test_an_ip_two_pods_report_belongs_to_the_older_one_whatever_the_order() -> None:
    old = pod("old", "198.18.1.9", created="2026-01-01T00:00:00Z")
    new = pod("new", "198.18.1.9", created="2026-01-01T00:00:05Z")
    assert host.live_heads({"ns/b": old, "ns/a": new}, CIDR) == {"198.18.1.9": "old"}
    assert host.live_heads({"ns/a": new, "ns/b": old}, CIDR) == {"198.18.1.9": "old"}


def test_workers_are_proxies_of_their_own_clusters_live_head_and_never_heads() -> None:
    pods = {
        "ns/h1": pod("h1", "198.18.1.1"),
        "ns/w1": pod("w1", "198.18.1.2", kind="worker"),
        "ns/w1b": pod("w1b", "198.18.1.3", kind="worker"),
        "ns/w2": pod("w2", "198.18.1.4", kind="worker", cluster="other"),  # no head
        "ns/w3": pod("w3", "198.18.1.5", kind="worker", namespace="elsewhere"),  # other ns
        "ns/w4": pod("w4", "198.18.1.6", kind="worker", phase="Pending"),
    }
    assert host.live_heads(pods, CIDR) == {"198.18.1.1": "h1"}
    assert host.live_proxies(pods, CIDR) == {"198.18.1.2": "198.18.1.1", "198.18.1.3": "198.18.1.1"}
    del pods["ns/h1"]
    assert host.live_proxies(pods, CIDR) == {}


def routes(table: dict[tuple[str, ...], str]) -> object:
    def fake_ip(*args: str) -> str:
        if args in table:
            return table[args]
        raise host.RouteError(f"ip {' '.join(args)} failed")

    return fake_ip


GOOD = {
    ("netns", "list"): "rso-0a1b2c3d (id: 3)\nother\n",
    ("route", "show", "dev", "rsoh0a1b2c3d"): "198.18.0.0/20 scope link src 198.19.255.254 \n",
    ("route", "get", "198.18.0.1"): "198.18.0.1 dev rsoh0a1b2c3d src 198.19.255.254 uid 0\n",
    ("route", "get", "198.18.8.0"): "198.18.8.0 dev rsoh0a1b2c3d src 198.19.255.254 uid 0\n",
    ("route", "get", "198.18.15.254"): "198.18.15.254 dev rsoh0a1b2c3d src 198.19.255.254\n",
}


def test_routes_into_the_namespace_veth_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "_ip", routes(GOOD))
    assert host.check_routes("rso-0a1b2c3d", "rsoh0a1b2c3d") == CIDR


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({("netns", "list"): "other\n"}, "does not exist"),
        ({("route", "show", "dev", "rsoh0a1b2c3d"): ""}, "no pod CIDR is routed"),
        ({("route", "get", "198.18.8.0"): "198.18.8.0 via 192.0.2.1 dev eth0 src 192.0.2.5\n"},
         "198.18.8.0 does not route into rsoh0a1b2c3d"),
        # A longer veth name that merely starts with ours is not ours.
        ({("route", "get", "198.18.0.1"): "198.18.0.1 dev rsoh0a1b2c3d9 src 198.19.255.254\n"},
         "198.18.0.1 does not route into"),
    ],
)  # fmt: skip
def test_anything_else_refuses(
    monkeypatch: pytest.MonkeyPatch, change: dict[tuple[str, ...], str], message: str
) -> None:
    monkeypatch.setattr(host, "_ip", routes({**GOOD, **change}))
    with pytest.raises(host.RouteError, match=message):
        host.check_routes("rso-0a1b2c3d", "rsoh0a1b2c3d")


def test_the_host_veth_name_is_only_guessed_for_pod_network_namespaces() -> None:
    assert host.default_host_veth("rso-0a1b2c3d") == "rsoh0a1b2c3d"
    with pytest.raises(host.RouteError, match="--host-veth"):
        host.default_host_veth("my-netns")


def test_main_refuses_before_doing_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(host, "_ip", routes({**GOOD, ("netns", "list"): ""}))
    assert host.main(["--kubeconfig", "/nonexistent", "--netns", "rso-0a1b2c3d"]) == 2
    assert "refusing to start: network namespace 'rso-0a1b2c3d' does not exist" in (
        capsys.readouterr().err
    )


def test_default_route_detection(tmp_path: pathlib.Path) -> None:
    header = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
    with_default = tmp_path / "with"
    with_default.write_text(header + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    pod_ns = tmp_path / "pod"
    pod_ns.write_text(header + "rsop1\tFEFF13C6\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n")
    assert inside.has_default_route(str(with_default)) is True
    assert inside.has_default_route(str(pod_ns)) is False


def test_the_inside_part_refuses_a_namespace_with_a_default_route(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(inside, "has_default_route", lambda: True)

    def must_not_run(*args: object) -> int:
        raise AssertionError("it went on to listen")

    monkeypatch.setattr(inside, "_amain", must_not_run)
    assert inside.main([]) == 2
    assert "refusing to listen here" in capsys.readouterr().err
