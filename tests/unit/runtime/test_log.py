"""runtime.log in a fresh interpreter each time: configure() is process-wide."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import structlog
    from runtime import log
    log.configure(sys.argv[1], "info")
    structlog.get_logger("runtime.controller").info("reconciled", key="ns/a")
    logging.getLogger("aiohttp.access").warning("GET /metrics 200")
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    logging.getLogger("noisy").debug("below the level")
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("runtime.controller").exception("reconcile failed")
    try:
        raise KeyError("stdlib boom")
    except KeyError:
        logging.getLogger("aiohttp.server").exception("handler failed")
    """
)


def _run(fmt: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, fmt],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout == ""
    return done.stderr


def test_json_is_one_object_per_line_for_structlog_and_stdlib_loggers() -> None:
    lines = _run("json").splitlines()
    records = [json.loads(line) for line in lines]  # every line parses: no stray text
    by_event = {r["event"]: r for r in records}
    assert set(by_event) == {
        "reconciled", "GET /metrics 200", "Task exception was never retrieved",
        "reconcile failed", "handler failed",
    }  # fmt: skip
    assert by_event["reconciled"]["logger"] == "runtime.controller"
    assert by_event["reconciled"]["key"] == "ns/a"
    assert by_event["GET /metrics 200"]["logger"] == "aiohttp.access"
    assert by_event["GET /metrics 200"]["level"] == "warning"
    assert by_event["Task exception was never retrieved"]["logger"] == "asyncio"
    for event, exc in (("reconcile failed", "ValueError"), ("handler failed", "KeyError")):
        record = by_event[event]
        assert record["level"] == "error"
        assert "Traceback (most recent call last)" in record["exception"]
        assert exc in record["exception"]
    assert all("timestamp" in r for r in records)


def test_console_has_stdlib_records_and_plain_tracebacks() -> None:
    out = _run("console")
    for text in ("reconciled", "runtime.controller", "GET /metrics 200", "aiohttp.access"):
        assert text in out
    assert "below the level" not in out
    # Plain Python tracebacks, not rich's boxes (which cost ~85 ms per logged failure).
    assert out.count("Traceback (most recent call last)") == 2
    for box in ("╭", "│"):
        assert box not in out


_FILE_SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import structlog
    from runtime import log
    log.configure(sys.argv[1], "info", file=sys.argv[2], file_format=sys.argv[3])
    structlog.get_logger("runtime.controller").info("reconciled", key="ns/a")
    logging.getLogger("aiohttp.access").warning("GET /metrics 200")
    structlog.get_logger("runtime.controller").debug("below the level")
    """
)


def test_a_log_file_gets_every_line_in_its_own_format(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "operator.log"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SCRIPT, "console", str(path), "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    on_stderr = done.stderr.splitlines()
    assert len(on_stderr) == 2
    assert "reconciled" in on_stderr[0]
    assert "key=ns/a" in on_stderr[0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(on_stderr[0])  # console on stderr
    in_file = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["event"], r["logger"]) for r in in_file] == [
        ("reconciled", "runtime.controller"), ("GET /metrics 200", "aiohttp.access")
    ]  # fmt: skip
    assert in_file[0]["key"] == "ns/a"
    assert in_file[0]["level"] == "info"
