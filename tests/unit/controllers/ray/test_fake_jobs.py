"""controllers.ray.fake's Jobs API: a scriptable job table answering as Ray's job module does."""

from __future__ import annotations

import pytest

from controllers.ray import dashboard, fake

JobStatus = dashboard.JobStatus


class Clock:
    def __init__(self) -> None:
        self.now = 1700000000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def head(clock: Clock) -> fake.FakeDashboard:
    return fake.FakeDashboard(clock=clock)


def request(submission_id: str | None = "job-1", **kw: object) -> dashboard.JobSubmitRequest:
    return dashboard.JobSubmitRequest(entrypoint="python x.py", submission_id=submission_id, **kw)  # type: ignore[arg-type]


async def test_a_submitted_job_is_pending_from_now_until_the_test_moves_it(
    head: fake.FakeDashboard, clock: Clock
) -> None:
    assert await head.submit_job(request(metadata={"k": "v"})) == "job-1"
    job = await head.get_job("job-1")
    assert job is not None
    assert (job.status, job.start_time, job.end_time) == ("PENDING", 1700000000000, None)
    assert (job.entrypoint, job.metadata) == ("python x.py", {"k": "v"})
    assert head.job_submissions == [request(metadata={"k": "v"})]

    clock.now += 2
    head.set_job("job-1", JobStatus.RUNNING)
    clock.now += 3
    head.set_job("job-1", JobStatus.SUCCEEDED, "Job finished successfully.", logs="ok\n")
    job = await head.get_job("job-1")
    assert job is not None
    assert (job.status, job.message, job.terminal) == (
        "SUCCEEDED",
        "Job finished successfully.",
        True,
    )
    assert (job.start_time, job.end_time, job.entrypoint) == (
        1700000000000, 1700000005000, "python x.py"
    )  # fmt: skip
    assert await head.get_job_logs("job-1") == "ok\n"
    assert [j.submission_id for j in await head.list_jobs()] == ["job-1"]


async def test_a_failed_outcome_carries_its_message_and_error_type(
    head: fake.FakeDashboard,
) -> None:
    await head.submit_job(request())
    head.set_job("job-1", "FAILED", "exit code 1", error_type="JOB_ENTRYPOINT_COMMAND_ERROR")
    job = await head.get_job("job-1")
    assert job is not None
    assert (job.status, job.message, job.error_type) == (
        "FAILED", "exit code 1", "JOB_ENTRYPOINT_COMMAND_ERROR"
    )  # fmt: skip
    assert job.end_time is not None


async def test_a_taken_id_is_job_exists_and_is_not_recorded(head: fake.FakeDashboard) -> None:
    await head.submit_job(request())
    with pytest.raises(dashboard.DashboardJobExists) as caught:
        await head.submit_job(request())
    assert (caught.value.status, caught.value.submission_id) == (500, "job-1")
    assert dashboard.JOB_EXISTS_MARKER in caught.value.text
    assert len(head.job_submissions) == 1
    assert head.job_calls["submit_job"] == 2


async def test_without_an_id_one_is_made_up(head: fake.FakeDashboard) -> None:
    first = await head.submit_job(request(None))
    second = await head.submit_job(request(None))
    assert first.startswith("raysubmit_")
    assert second.startswith("raysubmit_")
    assert first != second
    assert set(head.jobs) == {first, second}


async def test_unknown_jobs(head: fake.FakeDashboard) -> None:
    assert await head.get_job("nope") is None
    for call in (head.stop_job, head.delete_job, head.get_job_logs):
        with pytest.raises(dashboard.DashboardJobNotFound) as caught:
            await call("nope")
        assert (caught.value.status, caught.value.submission_id) == (404, "nope")


async def test_stop_stops_a_live_job_once_and_delete_needs_a_terminal_one(
    head: fake.FakeDashboard, clock: Clock
) -> None:
    await head.submit_job(request())
    with pytest.raises(dashboard.DashboardHTTPError, match="non-terminal state PENDING") as caught:
        await head.delete_job("job-1")
    assert caught.value.status == 500
    clock.now += 1
    assert await head.stop_job("job-1") is True
    job = await head.get_job("job-1")
    assert job is not None
    assert (job.status, job.end_time) == ("STOPPED", 1700000001000)
    assert await head.stop_job("job-1") is False
    assert await head.delete_job("job-1") is True
    assert await head.get_job("job-1") is None
    assert await head.list_jobs() == []


@pytest.mark.parametrize(
    "operation", ["submit_job", "get_job", "list_jobs", "stop_job", "delete_job", "get_job_logs"]
)
async def test_every_jobs_call_can_be_made_to_fail(
    head: fake.FakeDashboard, operation: fake.Operation
) -> None:
    head.set_job("job-1", JobStatus.SUCCEEDED)
    error = dashboard.DashboardTimeout("timed out")
    head.fail(operation, error, times=1)
    calls = {
        "submit_job": lambda: head.submit_job(request("job-2")),
        "get_job": lambda: head.get_job("job-1"),
        "list_jobs": lambda: head.list_jobs(),
        "stop_job": lambda: head.stop_job("job-1"),
        "delete_job": lambda: head.delete_job("job-1"),
        "get_job_logs": lambda: head.get_job_logs("job-1"),
    }
    with pytest.raises(dashboard.DashboardTimeout):
        await calls[operation]()
    assert set(head.jobs) == {"job-1"}  # a failed call changed nothing
    assert head.jobs["job-1"].status == "SUCCEEDED"
    await calls[operation]()  # only once
    assert head.job_calls[operation] == 2


async def test_submit_status_and_restart(clock: Clock) -> None:
    head = fake.FakeDashboard(submit_status=JobStatus.RUNNING, clock=clock)
    await head.submit_job(request())
    assert head.jobs["job-1"].status == "RUNNING"
    head.restart()
    assert head.jobs == {}
    assert await head.get_job("job-1") is None


async def test_the_factorys_fakes_share_the_job_table_per_cluster() -> None:
    fakes = fake.FakeDashboards()
    address = dashboard.address(cluster="c", namespace="ns")
    await fakes.client_for(address).submit_job(request())
    proxied = dashboard.address("kubernetes-proxy", cluster="c", namespace="ns")
    assert await fakes.client_for(proxied).get_job("job-1") is not None
    assert await fakes.for_cluster("ns", "other").get_job("job-1") is None
