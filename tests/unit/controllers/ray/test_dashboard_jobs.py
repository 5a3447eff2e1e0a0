"""controllers.ray.dashboard's Ray Jobs API calls over HTTP: the requests as Ray's job module
expects them (and KubeRay v1.7.0 sends them), the answers parsed, every failure typed.

Against the stand-in head on 127.0.0.1 (``head`` fixture), answering in the shapes of Ray
2.x's ``job_head.py`` (``JobDetails``, ``JobSubmitResponse``, ``JobStopResponse``,
``JobDeleteResponse``, ``JobLogsResponse``; its plain-text 404 and 500 tracebacks).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from controllers.ray import dashboard
from tests.unit.controllers.ray import headserver

FAST = dashboard.Timeouts(connect=0.3, total=0.3)

DETAILS: dict[str, Any] = {
    "type": "SUBMISSION",
    "job_id": "02000000",
    "submission_id": "rayjob-sample-abcde",
    "driver_info": {"id": "02000000", "node_ip_address": "10.244.0.6", "pid": "1234"},
    "status": "SUCCEEDED",
    "entrypoint": "python /home/ray/samples/sample_code.py",
    "message": "Job finished successfully.",
    "error_type": None,
    "start_time": 1700000000123,
    "end_time": 1700000012456,
    "metadata": {"owner": "team-a"},
    "runtime_env": {"pip": ["requests==2.26.0"]},
    "driver_agent_http_address": "http://10.244.0.6:52365",
    "driver_node_id": "ab" * 28,
    "driver_exit_code": 0,
}
"""A ``GET /api/jobs/<id>`` answer as Ray 2.x shapes ``JobDetails``."""


@pytest.fixture
async def dashboards() -> AsyncIterator[dashboard.Dashboards]:
    async with dashboard.Dashboards(timeouts=FAST) as owner:
        yield owner


def at(port: int) -> dashboard.Address:
    return dashboard.address(
        "pod-ip", cluster="demo", namespace="ray", head_pod_ip="127.0.0.1", dashboard_port=port
    )


def client(head: headserver.Head, owner: dashboard.Dashboards) -> dashboard.DashboardClient:
    return owner.client_for(at(head.port), auth_token="s3cret")


def json_answer(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def traceback_500(error: str) -> web.Response:
    """Ray's job head answers a failure with its traceback as plain text and a 500."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/ray/python/ray/dashboard/modules/job/job_head.py", line 287, in submit_job\n'
        "    resp = await job_agent_client.submit_job_internal(submit_request)\n"
        f"RuntimeError: Request failed with status code 500: {error}.\n"
    )
    return web.Response(status=500, text=text)


# -- submit ---------------------------------------------------------------------------------


async def test_submit_posts_kuberays_body_with_the_token_and_answers_the_submission_id(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(json_answer({"job_id": "rayjob-x", "submission_id": "rayjob-x"}))
    request = dashboard.JobSubmitRequest(
        entrypoint="python train.py",
        submission_id="rayjob-x",
        metadata={"owner": "team-a"},
        runtime_env={"pip": ["numpy"], "env_vars": {"A": "1"}},
        entrypoint_num_cpus=1.5,
        entrypoint_num_gpus=0,
        entrypoint_resources={"custom": 2.0},
    )
    assert await client(head, dashboards).submit_job(request) == "rayjob-x"
    (sent,) = head.requests
    assert (sent["method"], sent["path_qs"]) == ("POST", "/api/jobs/")
    assert sent["headers"]["Content-Type"] == "application/json"
    assert sent["headers"]["x-ray-authorization"] == "Bearer s3cret"
    assert json.loads(sent["body"]) == {
        "entrypoint": "python train.py",
        "submission_id": "rayjob-x",
        "metadata": {"owner": "team-a"},
        "runtime_env": {"pip": ["numpy"], "env_vars": {"A": "1"}},
        "entrypoint_num_cpus": 1.5,
        "entrypoint_resources": {"custom": 2.0},
    }


def test_the_submit_body_leaves_out_what_kuberay_leaves_out_and_keeps_negative_numbers() -> None:
    assert dashboard.JobSubmitRequest(entrypoint="").body() == {"entrypoint": ""}
    empty = dashboard.JobSubmitRequest(
        entrypoint="x", submission_id="", metadata={}, runtime_env={},
        entrypoint_num_cpus=0.0, entrypoint_num_gpus=0, entrypoint_resources={},
    )  # fmt: skip
    assert empty.body() == {"entrypoint": "x"}
    negative = dashboard.JobSubmitRequest(
        entrypoint="x", entrypoint_num_cpus=-1, entrypoint_num_gpus=-0.5
    )
    assert negative.body() == {
        "entrypoint": "x", "entrypoint_num_cpus": -1, "entrypoint_num_gpus": -0.5,
    }  # fmt: skip


async def test_submit_without_an_id_answers_the_one_ray_made(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [
        json_answer({"job_id": "raysubmit_AbC123", "submission_id": "raysubmit_AbC123"}),
        json_answer({"job_id": "raysubmit_old"}),  # Ray before submission_id was added
    ]
    request = dashboard.JobSubmitRequest(entrypoint="echo hi")
    assert await client(head, dashboards).submit_job(request) == "raysubmit_AbC123"
    assert json.loads(head.requests[0]["body"]) == {"entrypoint": "echo hi"}
    assert await client(head, dashboards).submit_job(request) == "raysubmit_old"


@pytest.mark.parametrize("status", [500, 400])
async def test_a_taken_submission_id_is_job_exists_carrying_the_id(
    head: headserver.Head, dashboards: dashboard.Dashboards, status: int
) -> None:
    message = (
        "ValueError: Job with submission_id rayjob-x already exists. "
        "Please use a different submission_id."
    )
    answer = traceback_500(message)
    answer.set_status(status)
    head.answers.append(answer)
    request = dashboard.JobSubmitRequest(entrypoint="python x.py", submission_id="rayjob-x")
    with pytest.raises(dashboard.DashboardJobExists) as caught:
        await client(head, dashboards).submit_job(request)
    error = caught.value
    assert isinstance(error, dashboard.DashboardHTTPError)
    assert (error.status, error.submission_id, error.method) == (status, "rayjob-x", "POST")
    assert error.url == f"http://127.0.0.1:{head.port}/api/jobs/"
    assert "already exists" in error.text


async def test_any_other_refused_submission_is_a_plain_http_error(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [
        traceback_500("No available agent to submit job, please try again later"),
        web.Response(status=400, text="TypeError: entrypoint must be a string"),
    ]
    request = dashboard.JobSubmitRequest(entrypoint="x", submission_id="s")
    for status in (500, 400):
        with pytest.raises(dashboard.DashboardHTTPError) as caught:
            await client(head, dashboards).submit_job(request)
        assert type(caught.value) is dashboard.DashboardHTTPError
        assert caught.value.status == status


@pytest.mark.parametrize(
    "body", [b"not json", b"[]", b'{"submission_id": 7}', b'{"submission_id": ""}', b"{}"]
)
async def test_a_submit_answer_without_an_id_is_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards, body: bytes
) -> None:
    head.answers.append(web.Response(status=200, body=body))
    with pytest.raises(dashboard.DashboardMalformed) as caught:
        await client(head, dashboards).submit_job(dashboard.JobSubmitRequest(entrypoint="x"))
    assert (caught.value.method, caught.value.text) == ("POST", body.decode())


# -- get and list ---------------------------------------------------------------------------


async def test_get_reads_job_details_and_ignores_the_fields_it_does_not_hold(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(json_answer(DETAILS))
    info = await client(head, dashboards).get_job("rayjob-sample-abcde")
    assert info == dashboard.JobInfo(
        job_id="02000000",
        submission_id="rayjob-sample-abcde",
        status="SUCCEEDED",
        message="Job finished successfully.",
        start_time=1700000000123,
        end_time=1700000012456,
        entrypoint="python /home/ray/samples/sample_code.py",
        metadata={"owner": "team-a"},
        error_type=None,
    )
    assert info.status == dashboard.JobStatus.SUCCEEDED
    assert info.terminal
    (sent,) = head.requests
    assert (sent["method"], sent["path_qs"]) == ("GET", "/api/jobs/rayjob-sample-abcde")
    assert sent["headers"]["x-ray-authorization"] == "Bearer s3cret"


async def test_a_pending_job_has_nulls_read_as_absent(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    pending = {**DETAILS, "status": "PENDING", "job_id": None, "driver_info": None,
               "message": None, "end_time": None, "metadata": None, "entrypoint": None}  # fmt: skip
    head.answers.append(json_answer(pending))
    info = await client(head, dashboards).get_job("rayjob-sample-abcde")
    assert info is not None
    assert (info.status, info.job_id, info.message, info.end_time) == ("PENDING", None, "", None)
    assert (info.entrypoint, info.metadata, info.terminal) == ("", {}, False)


async def test_get_of_an_unknown_job_is_none(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=404, text="Job nope does not exist"))
    assert await client(head, dashboards).get_job("nope") is None


async def test_a_job_id_is_one_percent_encoded_path_segment(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=404, text="Job does not exist"))
    assert await client(head, dashboards).get_job("../serve/applications") is None
    assert head.requests[0]["path_qs"] == "/api/jobs/..%2Fserve%2Fapplications"
    with pytest.raises(ValueError, match="cannot be empty"):
        await client(head, dashboards).get_job("")


async def test_a_job_with_an_unknown_status_keeps_it_and_one_without_is_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [
        json_answer({**DETAILS, "status": "ARCHIVED"}),
        json_answer({**DETAILS, "status": None}),
        json_answer({**DETAILS, "start_time": "yesterday"}),
        web.Response(status=200, text="<html>"),
    ]
    info = await client(head, dashboards).get_job("j")
    assert info is not None
    assert info.status == "ARCHIVED"
    assert not info.terminal
    for says in ("status", "start_time", "not JSON"):
        with pytest.raises(dashboard.DashboardMalformed, match=says) as caught:
            await client(head, dashboards).get_job("j")
        assert caught.value.url == f"http://127.0.0.1:{head.port}/api/jobs/j"


async def test_list_reads_every_job_driver_jobs_too(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    driver = {"type": "DRIVER", "job_id": "01000000", "submission_id": None,
              "status": "RUNNING", "entrypoint": "", "message": None}  # fmt: skip
    head.answers.append(json_answer([DETAILS, driver]))
    jobs = await client(head, dashboards).list_jobs()
    assert [(j.submission_id, j.job_id, j.status) for j in jobs] == [
        ("rayjob-sample-abcde", "02000000", "SUCCEEDED"), (None, "01000000", "RUNNING"),
    ]  # fmt: skip
    (sent,) = head.requests
    assert (sent["method"], sent["path_qs"]) == ("GET", "/api/jobs/")
    assert sent["headers"]["x-ray-authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{}", "not a list"),
        (b'[{"status": "RUNNING"}, {"submission_id": "x"}]', r"\[1\]status"),
        (b"[1]", "job details"),
        (b"nope", "not JSON"),
    ],
)
async def test_a_job_list_of_the_wrong_shape_is_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards, body: bytes, says: str
) -> None:
    head.answers.append(web.Response(status=200, body=body))
    with pytest.raises(dashboard.DashboardMalformed, match=says) as caught:
        await client(head, dashboards).list_jobs()
    assert caught.value.method == "GET"


def test_more_jobs_than_the_bound_are_refused_unparsed() -> None:
    jobs = [{"status": "SUCCEEDED"}] * (dashboard.MAX_JOBS + 1)
    with pytest.raises(dashboard.DashboardMalformed, match="10001 jobs"):
        dashboard.parse_job_list(json.dumps(jobs))


async def test_listing_jobs_answered_with_an_error_is_an_http_error(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=404, text="404: Not Found"))
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await client(head, dashboards).list_jobs()
    assert type(caught.value) is dashboard.DashboardHTTPError
    assert caught.value.status == 404


# -- stop, delete, logs ---------------------------------------------------------------------


async def test_stop_posts_to_the_jobs_stop_and_answers_rays_stopped(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [json_answer({"stopped": True}), json_answer({"stopped": False})]
    assert await client(head, dashboards).stop_job("j-1") is True
    assert await client(head, dashboards).stop_job("j-1") is False
    assert [(r["method"], r["path_qs"]) for r in head.requests] == [
        ("POST", "/api/jobs/j-1/stop"), ("POST", "/api/jobs/j-1/stop"),
    ]  # fmt: skip
    assert head.requests[0]["headers"]["x-ray-authorization"] == "Bearer s3cret"


async def test_delete_sends_delete_and_answers_rays_deleted(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(json_answer({"deleted": True}))
    assert await client(head, dashboards).delete_job("j-1") is True
    (sent,) = head.requests
    assert (sent["method"], sent["path_qs"]) == ("DELETE", "/api/jobs/j-1")
    assert sent["headers"]["x-ray-authorization"] == "Bearer s3cret"


async def test_deleting_a_job_that_still_runs_is_rays_500(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(
        traceback_500("Attempted to delete job 'j-1', but it is in a non-terminal state RUNNING")
    )
    with pytest.raises(dashboard.DashboardHTTPError, match="non-terminal") as caught:
        await client(head, dashboards).delete_job("j-1")
    assert type(caught.value) is dashboard.DashboardHTTPError
    assert caught.value.status == 500


async def test_logs_are_read_from_the_jobs_logs(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [json_answer({"logs": "hello\nworld\n"}), json_answer({"logs": ""})]
    assert await client(head, dashboards).get_job_logs("j-1") == "hello\nworld\n"
    assert await client(head, dashboards).get_job_logs("j-1") == ""
    assert head.requests[0]["path_qs"] == "/api/jobs/j-1/logs"
    assert head.requests[0]["headers"]["x-ray-authorization"] == "Bearer s3cret"


JobCall = Callable[[dashboard.DashboardClient], Awaitable[object]]
PER_JOB: dict[str, JobCall] = {
    "stop": lambda c: c.stop_job("gone"),
    "delete": lambda c: c.delete_job("gone"),
    "logs": lambda c: c.get_job_logs("gone"),
}


@pytest.mark.parametrize("call", PER_JOB.values(), ids=PER_JOB.keys())
async def test_stop_delete_and_logs_of_an_unknown_job_are_job_not_found(
    head: headserver.Head, dashboards: dashboard.Dashboards, call: JobCall
) -> None:
    head.answers.append(web.Response(status=404, text="Job gone does not exist"))
    with pytest.raises(dashboard.DashboardJobNotFound) as caught:
        await call(client(head, dashboards))
    error = caught.value
    assert isinstance(error, dashboard.DashboardHTTPError)
    assert (error.status, error.submission_id, error.text) == (
        404, "gone", "Job gone does not exist"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("call", "body"),
    [
        (PER_JOB["stop"], b'{"stopped": "yes"}'),
        (PER_JOB["stop"], b"[]"),
        (PER_JOB["delete"], b"{}"),
        (PER_JOB["delete"], b""),
        (PER_JOB["logs"], b'{"logs": null}'),
        (PER_JOB["logs"], b"plain text"),
    ],
)
async def test_stop_delete_and_logs_answers_of_the_wrong_shape_are_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards, call: JobCall, body: bytes
) -> None:
    head.answers.append(web.Response(status=200, body=body))
    with pytest.raises(dashboard.DashboardMalformed) as caught:
        await call(client(head, dashboards))
    assert caught.value.text == body.decode()
    assert caught.value.url.startswith(f"http://127.0.0.1:{head.port}/api/jobs/gone")


# -- bounded and timed out like the Serve calls ---------------------------------------------

EVERY_CALL: dict[str, JobCall] = {
    "submit": lambda c: c.submit_job(dashboard.JobSubmitRequest(entrypoint="x")),
    "get": lambda c: c.get_job("j"),
    "list": lambda c: c.list_jobs(),
    **PER_JOB,
}


@pytest.mark.parametrize("call", EVERY_CALL.values(), ids=EVERY_CALL.keys())
async def test_every_jobs_call_times_out(
    head: headserver.Head, dashboards: dashboard.Dashboards, call: JobCall
) -> None:
    head.answers.append(head.stall)
    with pytest.raises(dashboard.DashboardTimeout):
        await call(client(head, dashboards))


@pytest.mark.parametrize("call", EVERY_CALL.values(), ids=EVERY_CALL.keys())
async def test_every_jobs_answer_is_read_with_the_cap(head: headserver.Head, call: JobCall) -> None:
    big = json.dumps({"logs": "x" * 5000, "stopped": True, "deleted": True, "status": "RUNNING",
                      "submission_id": "j"})  # fmt: skip
    head.answers.append(web.Response(status=200, text=big, content_type="application/json"))
    async with dashboard.Dashboards(timeouts=FAST, max_body_bytes=4096) as owner:
        with pytest.raises(dashboard.DashboardMalformed, match="larger than 4096 bytes"):
            await call(owner.client_for(at(head.port)))


@pytest.mark.parametrize("call", EVERY_CALL.values(), ids=EVERY_CALL.keys())
async def test_every_jobs_call_refuses_redirects_and_is_unreachable_when_refused(
    head: headserver.Head, dashboards: dashboard.Dashboards, call: JobCall
) -> None:
    head.answers.append(web.Response(status=307, headers={"Location": "http://elsewhere/"}))
    with pytest.raises(dashboard.DashboardRedirected):
        await call(client(head, dashboards))
    assert len(head.requests) == 1
    refused = dashboards.client_for(at(1))
    with pytest.raises(dashboard.DashboardUnreachable):
        await call(refused)


async def test_without_a_token_the_jobs_calls_send_no_auth_header(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(json_answer([]))
    assert await dashboards.client_for(at(head.port)).list_jobs() == []
    assert "x-ray-authorization" not in {k.lower() for k in head.requests[0]["headers"]}
