"""``controllers/rayjob/setup.py``: which submitter Job events wake its RayJob - its end
and its deletion, not its progress counters (the plan never reads them)."""

from __future__ import annotations

from typing import Any

from controllers.rayjob import setup
from runtime.cache.informer import Event


def job(rv: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "pi", "resourceVersion": rv}, "status": status}


def test_a_submitter_s_progress_does_not_wake_the_rayjob_its_end_and_deletion_do() -> None:
    wakes = setup.submitter_changed
    created = job("1")
    started = job("2", active=1, startTime="2026-01-01T00:00:00Z")
    ready = job("3", active=1, ready=1)
    met = job("4", active=1, conditions=[{"type": "SuccessCriteriaMet", "status": "True"}])
    deleting = {**met, "metadata": {**met["metadata"], "deletionTimestamp": "2026-01-01T00:01:00Z"}}
    assert wakes(Event("add", created, None))
    assert not wakes(Event("update", started, created))
    assert not wakes(Event("update", ready, started))
    assert wakes(Event("update", met, ready))
    assert wakes(Event("update", deleting, met))
    assert wakes(Event("delete", deleting, None))
