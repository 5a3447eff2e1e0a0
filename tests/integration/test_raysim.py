"""tests/support/raysim: the Ray simulator answers at kwok head pods' IPs, through the pod network
and through the API server's pod proxy; an IP stops answering when its pod goes away; the
operator's dashboard client drives jobs through the simulated Ray Jobs API."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from controllers.ray import dashboard
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import raysim

HEAD_LABELS = {"ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(
        control_plane, deploy_delay=1.0, unimportable=("secret_pkg",),
        job_pending_s=1.0, job_run_s=2.0,
    ) as s:  # fmt: skip
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # A fresh connection per request, so a reset is seen by the request that meets it.
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=10, connect=5),
        connector=aiohttp.TCPConnector(force_close=True),
    ) as session:
        yield session


def pod_url(cp: controlplane.ControlPlane, ip: str, port: int, path: str) -> str:
    """A URL at a pod IP, refusing anything outside the verified pod network."""
    network = cp.pod_network
    assert network is not None
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(network.cidr), ip
    network.connections.append((ip, port))
    return f"http://{ip}:{port}{path}"


async def make_pod(
    cp: controlplane.ControlPlane, namespace: str, name: str, labels: dict[str, str]
) -> str:
    cp.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
         "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}},
    )  # fmt: skip

    def ip() -> str | None:
        pod = cp.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        status = pod.get("status") or {}
        return (
            str(status["podIP"])
            if status.get("phase") == "Running" and status.get("podIP")
            else None
        )

    return str(await helpers.eventually(ip, 90, f"pod {name} Running with an IP"))


async def answer(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, str]:
    """(status, body), or (0, error name) when the connection is refused or reset."""
    try:
        async with http.request(method, url, **kw) as response:
            return response.status, await response.text()
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
        return 0, type(exc).__name__


async def test_heads_answer_at_their_ips_through_deploying_running_and_deploy_failed(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    sim: raysim.Simulator,
    http: aiohttp.ClientSession,
) -> None:
    cp = control_plane
    head = await make_pod(cp, namespace, "head-a", HEAD_LABELS)
    other = await make_pod(cp, namespace, "head-b", HEAD_LABELS)
    worker = await make_pod(
        cp, namespace, "worker", {"ray.io/node-type": "worker", "ray.io/is-ray-node": "yes"}
    )

    async def healthy(ip: str) -> bool:
        status, body = await answer(http, "GET", pod_url(cp, ip, 8265, "/api/gcs_healthz"))
        return (status, body) == (200, "success")

    await helpers.eventually(lambda: healthy(head), 60, "head-a's dashboard")
    await helpers.eventually(lambda: healthy(other), 60, "head-b's dashboard")
    # Not a head: the connection is reset at once (aiohttp reports it as failing to connect).
    assert (await answer(http, "GET", pod_url(cp, worker, 8265, "/api/gcs_healthz")))[0] == 0
    assert await answer(http, "GET", pod_url(cp, head, 52365, "/api/local_raylet_healthz")) == (
        200, "success"
    )  # fmt: skip

    apps_url = pod_url(cp, head, 8265, "/api/serve/applications/")
    status, body = await answer(http, "GET", apps_url, params={"api_type": "declarative"})
    assert status == 200
    assert '"applications": {}' in body
    # No Serve yet: nothing listens on :8000.
    assert (await answer(http, "GET", pod_url(cp, head, 8000, "/-/healthz")))[0] == 0

    status, body = await answer(
        http, "PUT", apps_url, json={"applications": [{"name": "x", "route_prefix": "/x"}]}
    )
    assert status == 400
    assert "import_path" in body
    config = {
        "applications": [
            {"name": "fruit", "route_prefix": "/fruit", "import_path": "fruit.deployment_graph"},
            {"name": "math", "route_prefix": "/calc", "import_path": "conditional_dag.serve_dag"},
            {"name": "bad", "route_prefix": "/bad", "import_path": "does_not_exist.app"},
        ]
    }
    assert await answer(http, "PUT", apps_url, json=config) == (200, "")

    async def applications() -> dict[str, Any]:
        async with http.get(apps_url, params={"api_type": "declarative"}) as response:
            assert response.status == 200
            result: dict[str, Any] = (await response.json())["applications"]
            return result

    first = await applications()
    assert {name: app["status"] for name, app in first.items()} == {
        "fruit": "DEPLOYING", "math": "DEPLOYING", "bad": "DEPLOYING",
    }  # fmt: skip

    async def settled() -> dict[str, Any] | None:
        apps = await applications()
        statuses = {name: app["status"] for name, app in apps.items()}
        wanted = {"fruit": "RUNNING", "math": "RUNNING", "bad": "DEPLOY_FAILED"}
        return apps if statuses == wanted else None

    apps = await helpers.eventually(settled, 30, "RUNNING and DEPLOY_FAILED")
    assert "No module named 'does_not_exist'" in apps["bad"]["message"]
    assert apps["fruit"]["deployments"]["deployment_graph"]["status"] == "HEALTHY"

    assert await answer(http, "GET", pod_url(cp, head, 8000, "/-/healthz")) == (200, "success")
    assert await answer(http, "GET", pod_url(cp, head, 8000, "/fruit")) == (200, "fruit")
    assert await answer(http, "GET", pod_url(cp, head, 8000, "/calc/x")) == (200, "math")
    assert (await answer(http, "GET", pod_url(cp, head, 8000, "/bad")))[0] == 404

    # The other head is a separate Ray cluster.
    status, body = await answer(http, "GET", pod_url(cp, other, 8265, "/api/serve/applications/"))
    assert (status, '"applications": {}' in body) == (200, True)

    # The API server's pod proxy reaches the same head (what --use-kubernetes-proxy uses).
    proxied = cp.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods/head-a:8265/proxy/api/serve/applications/"
    )
    assert {n: a["status"] for n, a in proxied["applications"].items()} == {
        "fruit": "RUNNING", "math": "RUNNING", "bad": "DEPLOY_FAILED",
    }  # fmt: skip
    assert cp.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods/head-a:8000/proxy/-/healthz"
    ) == ("success")

    # Applications left out of a PUT go away.
    fewer = {"applications": config["applications"][:1]}
    assert await answer(http, "PUT", apps_url, json=fewer) == (200, "")
    assert set(await applications()) == {"fruit"}

    # A deleted pod's IP stops answering; its neighbour does not.
    cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/head-a?gracePeriodSeconds=0")

    async def gone() -> bool:
        return (await answer(http, "GET", pod_url(cp, head, 8265, "/api/gcs_healthz")))[0] == 0

    await helpers.eventually(gone, 60, "head-a's IP refusing")
    assert (await answer(http, "GET", pod_url(cp, head, 8000, "/-/healthz")))[0] == 0
    assert await healthy(other)


async def test_fault_switches_over_the_admin_api(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    sim: raysim.Simulator,
    http: aiohttp.ClientSession,
) -> None:
    cp = control_plane
    ip = await make_pod(cp, namespace, "head", HEAD_LABELS)
    await helpers.eventually(lambda: ip in sim.state()["ips"], 60, "the simulator to know the head")
    apps_url = pod_url(cp, ip, 8265, "/api/serve/applications/")
    config = {"applications": [{"name": "a", "route_prefix": "/a", "import_path": "m.app"}]}
    assert await answer(http, "PUT", apps_url, json=config) == (200, "")

    async def status_of_a() -> str:
        async with http.get(apps_url) as response:
            apps = (await response.json())["applications"]
            return str(apps["a"]["status"]) if "a" in apps else ""

    await helpers.eventually(lambda: _is(status_of_a(), "RUNNING"), 30, "a RUNNING")

    assert sim.fault(ip, unhealthy="a") == {"ok": True, "unhealthy": True}
    assert await status_of_a() == "UNHEALTHY"

    assert sim.fault(ip, dashboard_down=True)["ok"] is True
    assert (await answer(http, "GET", apps_url))[0] == 0
    assert await answer(http, "GET", pod_url(cp, ip, 8000, "/a")) == (200, "a")
    sim.fault(ip, dashboard_down=False)

    sim.fault(ip, slow_s=2.0)
    status, _ = await answer(http, "GET", apps_url, timeout=aiohttp.ClientTimeout(total=30))
    assert status == 200
    with pytest.raises(TimeoutError):
        await answer(http, "GET", apps_url, timeout=aiohttp.ClientTimeout(total=0.5))
    sim.fault(ip, slow_s=0)

    assert sim.fault(ip, restart=True)["ok"] is True
    status, body = await answer(http, "GET", apps_url)
    assert (status, '"applications": {}' in body) == (200, True)
    assert (await answer(http, "GET", pod_url(cp, ip, 8000, "/-/healthz")))[0] == 0
    assert sim.fault("198.18.255.254", restart=True)["ok"] is False


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


def test_it_refuses_to_start_unless_the_pod_cidr_routes_into_the_namespace(
    control_plane: controlplane.ControlPlane,
) -> None:
    network = control_plane.pod_network
    assert network is not None
    assert control_plane.kubeconfig is not None
    base = [
        sys.executable,
        "-m",
        "tests.support.raysim",
        "--kubeconfig",
        str(control_plane.kubeconfig),
    ]
    for extra, why in (
        (["--netns", "rso-00000000"], "does not exist"),
        (
            ["--netns", network.namespace, "--host-veth", "lo", "--pod-cidr", network.cidr],
            "does not route into lo",
        ),
        (["--netns", network.namespace, "--pod-cidr", "198.18.240.0/20"], "does not route into"),
    ):
        done = subprocess.run(
            [*base, *extra],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=helpers.ROOT,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "refusing to start" in done.stderr
        assert why in done.stderr
        assert done.stdout == ""


async def test_the_dashboard_client_drives_jobs_through_the_simulated_jobs_api(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    sim: raysim.Simulator,
) -> None:
    cp = control_plane
    ip = await make_pod(cp, namespace, "head-jobs", HEAD_LABELS)
    await helpers.eventually(lambda: ip in sim.state()["ips"], 60, "the simulator to know the head")
    pod_url(cp, ip, 8265, "/api/jobs/")  # checks the IP is inside the pod network
    address = dashboard.address("pod-ip", cluster="jobs", namespace=namespace, head_pod_ip=ip)
    async with dashboard.Dashboards(timeouts=dashboard.Timeouts(total=10)) as owner:
        client = owner.client_for(address)

        # Submitted: PENDING, then RUNNING, then SUCCEEDED (1 s and 2 s, the fixture's defaults).
        request = dashboard.JobSubmitRequest(
            entrypoint="python /home/ray/samples/sample_code.py", submission_id="ok-1",
            metadata={"owner": "team-a"}, entrypoint_num_cpus=1,
        )  # fmt: skip
        assert await client.submit_job(request) == "ok-1"
        with pytest.raises(dashboard.DashboardJobExists):
            await client.submit_job(request)
        seen: list[str] = []

        async def succeeded() -> dashboard.JobInfo | None:
            info = await client.get_job("ok-1")
            assert info is not None
            if not seen or seen[-1] != info.status:
                seen.append(info.status)
            return info if info.status == dashboard.JobStatus.SUCCEEDED else None

        done = await helpers.eventually(succeeded, 30, "job ok-1 SUCCEEDED")
        assert seen == ["PENDING", "RUNNING", "SUCCEEDED"]
        assert done.start_time is not None
        assert done.end_time is not None
        assert 2900 <= done.end_time - done.start_time <= 3100  # epoch ms: 1 s + 2 s
        assert done.metadata == {"owner": "team-a"}
        assert "running python /home/ray/samples/sample_code.py" in (
            await client.get_job_logs("ok-1")
        )

        # One that runs until stopped: STOPPED, then deleted.
        forever = dashboard.JobSubmitRequest(
            entrypoint="python serve.py", submission_id="forever-1",
            metadata={"raysim.outcome": "forever", "raysim.pending_s": "0"},
        )  # fmt: skip
        await client.submit_job(forever)
        await helpers.eventually(
            lambda: _status(client, "forever-1", "RUNNING"), 30, "forever-1 RUNNING"
        )
        with pytest.raises(dashboard.DashboardHTTPError, match="non-terminal"):
            await client.delete_job("forever-1")
        assert await client.stop_job("forever-1") is True
        assert await _status(client, "forever-1", "STOPPED")
        assert await client.stop_job("forever-1") is False
        assert await client.delete_job("forever-1") is True
        assert await client.get_job("forever-1") is None
        with pytest.raises(dashboard.DashboardJobNotFound):
            await client.stop_job("forever-1")

        # A failed outcome, chosen by the entrypoint: FAILED with its message.
        failing = dashboard.JobSubmitRequest(
            entrypoint="python train.py raysim.outcome=fail raysim.pending_s=0 raysim.run_s=0.5 "
            "'raysim.message=CUDA out of memory'",
            submission_id="fail-1",
        )
        await client.submit_job(failing)
        await helpers.eventually(lambda: _status(client, "fail-1", "FAILED"), 30, "fail-1 FAILED")
        failed = await client.get_job("fail-1")
        assert failed is not None
        assert (failed.message, failed.error_type) == (
            "CUDA out of memory", "JOB_ENTRYPOINT_COMMAND_ERROR"
        )  # fmt: skip
        assert {j.submission_id for j in await client.list_jobs()} == {"ok-1", "fail-1"}

    # The Jobs requests, counted per job (what a benchmark reports per job).
    counts = sim.job_requests()
    per_job = {
        job: sum(n for (at, j, _, _), n in counts.items() if at == ip and j == job)
        for job in ("ok-1", "forever-1", "fail-1")
    }
    assert counts[(ip, "ok-1", "POST", "/api/jobs/")] == 2
    assert counts[(ip, "forever-1", "POST", "/api/jobs/{id}/stop")] == 3
    assert counts[(ip, "", "GET", "/api/jobs/")] == 1
    assert all(n >= 3 for n in per_job.values()), per_job
    assert sim.requests()[(ip, "dashboard", "DELETE", "/api/jobs/forever-1")] == 2


async def _status(client: dashboard.DashboardClient, submission_id: str, wanted: str) -> bool:
    info = await client.get_job(submission_id)
    return info is not None and info.status == wanted
