"""tests/support/raysim/inside.py answers the Ray Jobs API on :8265, on loopback in this process:
the operator's own dashboard client against it (what the RayJob controller will call), and the
Jobs requests counted per job."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
import pytest

from controllers.ray import dashboard
from tests.support.raysim import host, inside, jobs, serve

IP = "127.0.0.1"


class Clock:
    def __init__(self) -> None:
        self.now = 1700000000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def sim(clock: Clock) -> AsyncIterator[inside.Inside]:
    part = inside.Inside(
        serve.Behaviour(deploy_delay=0.0),
        {"dashboard": 0, "serve": 0, "agent": 0},
        clock=clock,
        job_defaults=jobs.Defaults(pending_s=1.0, run_s=2.0),
    )
    await part.start(host=IP)
    part.set_pods({IP: "uid-1"})
    try:
        yield part
    finally:
        await part.stop()


@pytest.fixture
async def client(sim: inside.Inside) -> AsyncIterator[dashboard.DashboardClient]:
    async with dashboard.Dashboards() as owner:
        yield owner.client_for(
            dashboard.address(
                "pod-ip", cluster="c", namespace="ns", head_pod_ip=IP,
                dashboard_port=sim.ports["dashboard"],
            )
        )  # fmt: skip


def submit(
    entrypoint: str, submission_id: str | None = None, **kw: object
) -> dashboard.JobSubmitRequest:
    return dashboard.JobSubmitRequest(entrypoint=entrypoint, submission_id=submission_id, **kw)  # type: ignore[arg-type]


async def test_the_dashboard_client_drives_a_job_through_its_lifecycle(
    sim: inside.Inside, client: dashboard.DashboardClient, clock: Clock
) -> None:
    assert await client.submit_job(submit("python x.py", "j-1", metadata={"a": "b"})) == "j-1"
    with pytest.raises(dashboard.DashboardJobExists) as taken:
        await client.submit_job(submit("python x.py", "j-1"))
    assert taken.value.status == 500
    seen = []
    for _ in range(3):
        info = await client.get_job("j-1")
        assert info is not None
        seen.append(info.status)
        clock.now += 1.5
    assert seen == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert info.start_time == 1700000000000
    assert info.end_time == 1700000003000
    assert info.metadata == {"a": "b"}
    assert "running python x.py" in await client.get_job_logs("j-1")
    assert [j.submission_id for j in await client.list_jobs()] == ["j-1"]
    assert await client.stop_job("j-1") is False
    assert await client.delete_job("j-1") is True
    assert await client.get_job("j-1") is None
    with pytest.raises(dashboard.DashboardJobNotFound):
        await client.get_job_logs("j-1")

    counts = {key[1:]: n for key, n in sim.job_requests.items() if key[0] == IP}
    assert counts == {
        ("j-1", "POST", "/api/jobs/"): 2,
        ("j-1", "GET", "/api/jobs/{id}"): 4,
        ("j-1", "GET", "/api/jobs/{id}/logs"): 2,
        ("", "GET", "/api/jobs/"): 1,
        ("j-1", "POST", "/api/jobs/{id}/stop"): 1,
        ("j-1", "DELETE", "/api/jobs/{id}"): 1,
    }
    assert sim.requests[(IP, "dashboard", "GET", "/api/jobs/j-1")] == 4


async def test_stop_a_job_that_runs_forever_and_a_failed_outcome(
    client: dashboard.DashboardClient, clock: Clock
) -> None:
    await client.submit_job(submit("serve raysim.outcome=forever", "s"))
    await client.submit_job(
        submit("python t.py", "f", metadata={"raysim.outcome": "fail", "raysim.message": "boom"})
    )
    clock.now += 3600
    running = await client.get_job("s")
    assert running is not None
    assert running.status == "RUNNING"
    with pytest.raises(dashboard.DashboardHTTPError, match="non-terminal"):
        await client.delete_job("s")
    assert await client.stop_job("s") is True
    stopped = await client.get_job("s")
    assert stopped is not None
    assert (stopped.status, stopped.terminal) == ("STOPPED", True)
    failed = await client.get_job("f")
    assert failed is not None
    assert (failed.status, failed.message, failed.error_type) == (
        "FAILED", "boom", "JOB_ENTRYPOINT_COMMAND_ERROR"
    )  # fmt: skip


async def test_a_submission_without_an_id_is_counted_under_the_one_ray_made(
    sim: inside.Inside, client: dashboard.DashboardClient
) -> None:
    made = await client.submit_job(submit("python x.py"))
    assert made.startswith("raysubmit_")
    assert sim.job_requests[(IP, made, "POST", "/api/jobs/")] == 1
    with pytest.raises(dashboard.DashboardHTTPError) as bad:
        await client.submit_job(submit("x raysim.outcome=maybe", "bad"))
    assert bad.value.status == 400
    assert sim.job_requests[(IP, "bad", "POST", "/api/jobs/")] == 1


async def test_a_restart_forgets_the_jobs_and_other_job_paths_are_404(
    sim: inside.Inside, client: dashboard.DashboardClient
) -> None:
    await client.submit_job(submit("python x.py", "j"))
    assert sim.fault({"ip": IP, "restart": True})["ok"] is True
    assert await client.get_job("j") is None
    port = sim.ports["dashboard"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://{IP}:{port}/api/jobs/j/elsewhere") as response:
            assert response.status == 404
        async with http.put(f"http://{IP}:{port}/api/jobs/j") as response:
            assert response.status == 405
        async with http.post(f"http://{IP}:{port}/api/jobs/", data=b"{nope") as response:
            assert response.status == 400


def test_the_job_defaults_come_from_the_command_line() -> None:
    args = inside.parse_args(
        ["--job-pending-s", "0.5", "--job-run-s", "7", "--job-outcome", "fail"]
    )
    assert inside.job_defaults_from(args) == jobs.Defaults(pending_s=0.5, run_s=7, outcome="fail")
    assert inside.job_defaults_from(inside.parse_args([])) == jobs.Defaults()
    hosted = host.parse_args(["--kubeconfig", "k", "--netns", "n", "--job-outcome", "forever"])
    assert isinstance(hosted, argparse.Namespace)
    assert (hosted.job_outcome, hosted.job_pending_s) == ("forever", 1.0)
