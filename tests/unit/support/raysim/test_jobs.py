"""tests/support/raysim/jobs.py: a head's job table, pure (a test clock, no HTTP)."""

from __future__ import annotations

import pytest

from tests.support.raysim import jobs

T0 = 1700000000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(clock: Clock) -> jobs.Jobs:
    return jobs.Jobs(jobs.Defaults(pending_s=1.0, run_s=3.0), clock=clock, ip="198.18.1.7")


def submit(table: jobs.Jobs, entrypoint: str = "python x.py", **body: object) -> str:
    answer = table.submit({"entrypoint": entrypoint, **body})
    assert answer["job_id"] == answer["submission_id"]
    return answer["submission_id"]


def test_a_job_is_pending_then_running_then_succeeded_in_epoch_milliseconds(
    table: jobs.Jobs, clock: Clock
) -> None:
    assert submit(table, submission_id="j", metadata={"k": "v"}) == "j"
    pending = table.get("j")
    assert pending["status"] == "PENDING"
    assert (pending["job_id"], pending["driver_info"], pending["end_time"]) == (None, None, None)
    assert pending["start_time"] == 1700000000000
    assert (pending["message"], pending["metadata"]) == ("Job has not started yet.", {"k": "v"})
    assert table.logs("j") == {"logs": ""}

    clock.now = T0 + 1.0
    running = table.get("j")
    assert (running["status"], running["message"]) == ("RUNNING", "Job is currently running.")
    assert running["job_id"] == "02000000"
    assert running["driver_info"]["node_ip_address"] == "198.18.1.7"
    assert running["driver_agent_http_address"] == "http://198.18.1.7:52365"
    assert "running python x.py" in table.logs("j")["logs"]
    assert table.get("02000000")["submission_id"] == "j"  # a driver's job id finds it too

    clock.now = T0 + 4.0
    done = table.get("j")
    assert (done["status"], done["message"]) == ("SUCCEEDED", "Job finished successfully.")
    assert (done["start_time"], done["end_time"]) == (1700000000000, 1700000004000)
    assert (done["driver_exit_code"], done["error_type"]) == (0, None)
    assert table.logs("j")["logs"].endswith("raysim: finished\n")
    assert set(done) >= {"type", "entrypoint", "runtime_env", "driver_node_id"}


def test_a_failing_job_fails_with_its_message_after_its_own_times(
    table: jobs.Jobs, clock: Clock
) -> None:
    submit(
        table,
        "python train.py raysim.outcome=fail raysim.pending_s=0 raysim.run_s=2 "
        "'raysim.message=CUDA out of memory'",
        submission_id="f",
    )
    assert table.get("f")["status"] == "RUNNING"
    clock.now = T0 + 2.0
    failed = table.get("f")
    assert (failed["status"], failed["message"]) == ("FAILED", "CUDA out of memory")
    assert (failed["error_type"], failed["driver_exit_code"]) == ("JOB_ENTRYPOINT_COMMAND_ERROR", 1)
    assert failed["end_time"] == 1700000002000


def test_without_a_message_a_failure_says_what_ray_says(table: jobs.Jobs, clock: Clock) -> None:
    submit(table, submission_id="f", metadata={"raysim.outcome": "fail"})
    clock.now = T0 + 10
    assert table.get("f")["message"].startswith(
        "Job entrypoint command failed with exit code 1, last available logs"
    )


def test_metadata_wins_over_the_entrypoint_and_the_entrypoint_over_the_defaults(
    clock: Clock,
) -> None:
    defaults = jobs.Defaults(pending_s=5, run_s=5, outcome="fail")
    script = jobs.Script.of(defaults, "x raysim.outcome=succeed raysim.run_s=1", {})
    assert script == jobs.Script(pending_s=5, run_s=1, outcome="succeed")
    script = jobs.Script.of(defaults, "x raysim.outcome=succeed", {"raysim.outcome": "forever"})
    assert script.outcome == "forever"
    assert jobs.Script.of(defaults, "x", {"other": "1"}) == jobs.Script(
        pending_s=5, run_s=5, outcome="fail"
    )


@pytest.mark.parametrize(
    ("entrypoint", "metadata", "says"),
    [
        ("x raysim.outcome=maybe", {}, "is not one of succeed, fail, forever"),
        ("x", {"raysim.run_s": "-1"}, "is not seconds >= 0"),
        ("x raysim.pending_s=soon", {}, "is not seconds >= 0"),
        ("x raysim.colour=blue", {}, "unknown directive raysim.colour"),
    ],
)
def test_a_bad_directive_refuses_the_submission(
    table: jobs.Jobs, entrypoint: str, metadata: dict[str, str], says: str
) -> None:
    with pytest.raises(jobs.JobError, match=says) as caught:
        table.submit({"entrypoint": entrypoint, "metadata": metadata})
    assert caught.value.status == 400
    assert len(table) == 0


def test_a_job_that_runs_forever_runs_until_stopped(table: jobs.Jobs, clock: Clock) -> None:
    submit(table, "serve forever raysim.outcome=forever", submission_id="s")
    clock.now = T0 + 3600
    assert table.get("s")["status"] == "RUNNING"
    with pytest.raises(jobs.JobError, match="non-terminal state RUNNING") as caught:
        table.delete("s")
    assert caught.value.status == 500
    assert table.stop("s") == {"stopped": True}
    clock.now += 5
    stopped = table.get("s")
    assert (stopped["status"], stopped["message"]) == ("STOPPED", "Job was intentionally stopped.")
    assert stopped["end_time"] == int((T0 + 3600) * 1000)
    assert table.stop("s") == {"stopped": False}
    assert table.logs("s")["logs"].endswith("raysim: stopped\n")
    assert table.delete("s") == {"deleted": True}
    with pytest.raises(jobs.JobError) as gone:
        table.get("s")
    assert (gone.value.status, gone.value.text) == (404, "Job s does not exist")


def test_a_job_stopped_while_pending_never_ran_and_a_finished_one_is_not_stopped(
    table: jobs.Jobs, clock: Clock
) -> None:
    submit(table, submission_id="p")
    submit(table, submission_id="d", metadata={"raysim.run_s": "0", "raysim.pending_s": "0"})
    assert table.stop("p") == {"stopped": True}
    clock.now += 10
    stopped = table.get("p")
    assert (stopped["status"], stopped["job_id"], stopped["end_time"]) == (
        "STOPPED", None, 1700000000000
    )  # fmt: skip
    assert table.logs("p") == {"logs": ""}
    assert table.stop("d") == {"stopped": False}
    assert table.get("d")["status"] == "SUCCEEDED"


def test_a_taken_submission_id_is_rays_500(table: jobs.Jobs) -> None:
    submit(table, submission_id="j")
    with pytest.raises(jobs.JobError) as caught:
        table.submit({"entrypoint": "again", "submission_id": "j"})
    assert caught.value.status == 500
    assert (
        "Job with submission_id j already exists. Please use a different submission_id."
        in caught.value.text
    )
    assert len(table) == 1


def test_without_an_id_the_head_makes_one(table: jobs.Jobs) -> None:
    first, second = submit(table), submit(table)
    assert first.startswith("raysubmit_")
    assert len(first) == len("raysubmit_") + 16
    assert first != second
    assert [job["submission_id"] for job in table.list()] == [first, second]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "must be a JSON object"),
        ({}, "entrypoint must be a string"),
        ({"entrypoint": 3}, "entrypoint must be a string"),
        ({"entrypoint": "x", "submission_id": 5}, "submission_id must be a string"),
        ({"entrypoint": "x", "metadata": {"a": 1}}, "metadata must be a dict of strings"),
        ({"entrypoint": "x", "runtime_env": []}, "runtime_env must be a dict"),
        ({"entrypoint": "x", "entrypoint_num_cpus": "2"}, "entrypoint_num_cpus must be a number"),
        ({"entrypoint": "x", "colour": "blue"}, "unexpected keyword argument 'colour'"),
    ],
)
def test_a_request_ray_would_refuse_is_a_400_traceback(
    table: jobs.Jobs, body: object, says: str
) -> None:
    with pytest.raises(jobs.JobError, match=says) as caught:
        table.submit(body)
    assert caught.value.status == 400
    assert caught.value.text.startswith("Traceback (most recent call last):")


def test_negative_numbers_are_taken_as_ray_takes_them(table: jobs.Jobs) -> None:
    submit(table, submission_id="n", entrypoint_num_cpus=-1, entrypoint_num_gpus=0.5)
    assert table.get("n")["status"] == "PENDING"


def test_unknown_ids_are_404_for_every_call(table: jobs.Jobs) -> None:
    for call in (table.get, table.stop, table.delete, table.logs):
        with pytest.raises(jobs.JobError) as caught:
            call("nope")
        assert caught.value.status == 404


def test_clear_forgets_every_job(table: jobs.Jobs) -> None:
    submit(table, submission_id="j")
    table.clear()
    assert table.list() == []
