from __future__ import annotations

import prometheus_client
import pytest

from runtime import metrics


def test_families_expose_in_prometheus_text_format() -> None:
    reg = prometheus_client.CollectorRegistry()
    counter = metrics.Family("t_requests_total", "Requests.", "counter", ("code",), registry=reg)
    gauge = metrics.Family("t_depth", "Depth.", "gauge", registry=reg)
    hist = metrics.Family("t_seconds", "Time.", "histogram", buckets=(0.1, 1), registry=reg)
    func = metrics.Family("t_live", "Live.", "gauge", registry=reg)
    counter.counter("200").inc(3)
    gauge.gauge().inc(5)
    gauge.gauge().dec(2)
    for value in (0.05, 0.1, 0.5, 7):
        hist.histogram().observe(value)
    func.func(lambda: 42.0)
    text = prometheus_client.generate_latest(reg).decode()
    assert 't_requests_total{code="200"} 3.0' in text
    assert "t_depth 3.0" in text
    assert 't_seconds_bucket{le="0.1"} 2.0' in text
    assert 't_seconds_bucket{le="1.0"} 3.0' in text
    assert 't_seconds_bucket{le="+Inf"} 4.0' in text
    assert "t_seconds_count 4.0" in text
    assert "t_seconds_sum 7.65" in text
    assert "t_live 42.0" in text


def test_duplicate_names_are_refused_by_the_registry() -> None:
    reg = prometheus_client.CollectorRegistry()
    metrics.Family("dup_total", "x", "counter", registry=reg)
    with pytest.raises(ValueError, match="Duplicated"):
        metrics.Family("dup_total", "x", "counter", registry=reg)


def test_label_count_is_checked() -> None:
    fam = metrics.Family("lbl_total", "x", "counter", ("a", "b"), registry=None)
    with pytest.raises(ValueError, match="takes labels"):
        fam.counter("only-one")


def test_histogram_needs_buckets() -> None:
    with pytest.raises(ValueError, match="needs buckets"):
        metrics.Family("h", "x", "histogram", registry=None)


def test_framework_registry_carries_process_and_python_runtime_collectors() -> None:
    # controller-runtime serves process and Go runtime metrics beside its own; the Python
    # equivalents are prometheus_client's process, GC and platform collectors.
    text = prometheus_client.generate_latest(metrics.registry).decode()
    names = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds")
    for name in (*names, "python_gc_objects_collected_total", "python_info"):
        assert f"\n{name}" in text or text.startswith(name), f"{name} missing from /metrics"
