"""``serveConfigV2`` is bounded: no alias bomb, no text past the CRD's bound, no loop stall.

A 420-byte YAML "billion laughs" once took the operator to 1.4 GiB (past its memory
limit: a crash loop), and a legitimate 1.27 MB config stalled the event loop 4.3 s.
Bounds stated here: the bomb is refused in under 0.5 s with under 16 MiB allocated;
a 1 MB config is parsed off the loop (no loop stall over 100 ms) once, and read
again from the cache in under 0.2 s.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from controllers.ray import serveconfig
from controllers.rayservice import validation


def bomb(width: int = 9, depth: int = 9) -> str:
    """9 levels of 9 aliases: 9^8 (43 million) strings once expanded."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = ["a: &a [lol]"]
    for level in range(1, depth):
        refs = ",".join(f"*{letters[level - 1]}" for _ in range(width))
        lines.append(f"{letters[level]}: &{letters[level]} [{refs}]")
    lines.append(f"applications: [{{name: x, import_path: m.x, args: *{letters[depth - 1]}}}]")
    return "\n".join(lines) + "\n"


def big_config(target: int = 1_000_000) -> str:
    parts = ["applications:\n"]
    size, index = 0, 0
    while size < target:
        app = (
            f"- name: app-{index}\n"
            f"  import_path: package.module_{index}:app\n"
            f"  route_prefix: /r{index}\n"
            "  runtime_env:\n"
            f"    env_vars: {{MODEL: model-{index}, REVISION: r{index}, REGION: somewhere}}\n"
            "  deployments:\n"
            f"  - name: Model{index}\n"
            "    num_replicas: 2\n"
            f"    user_config: {{threshold: 0.{index % 10}, labels: [a, b, c]}}\n"
        )
        parts.append(app)
        size += len(app)
        index += 1
    return "".join(parts)


def test_a_420_byte_alias_bomb_is_refused_at_once_and_small() -> None:
    text = bomb()
    assert len(text) <= 420
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(serveconfig.ServeConfigError, match="anchors and aliases"):
            serveconfig.serve_config(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 0.5
    assert peak < 16 * 1024 * 1024, f"{peak / 2**20:.1f} MiB allocated"


def test_the_bomb_is_a_validation_problem_naming_the_field() -> None:
    service = {
        "metadata": {"name": "svc", "namespace": "ns"},
        "spec": {
            "rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}},
            "serveConfigV2": bomb(),
        },
    }
    found = [p for p in validation.problems(service) if "aliases" in p]
    assert len(found) == 1, found
    assert found[0].startswith("spec.serveConfigV2"), found


def test_moderate_anchors_are_fine() -> None:
    text = (
        "shared: &env {env_vars: {A: '1', B: '2'}}\n"
        "applications:\n"
        "- {name: a, import_path: m.a, route_prefix: /a, runtime_env: *env}\n"
        "- {name: b, import_path: m.b, route_prefix: /b, runtime_env: *env}\n"
    )
    config = serveconfig.serve_config(text)
    assert config["applications"][1]["runtime_env"] == {"env_vars": {"A": "1", "B": "2"}}


def test_text_past_the_bound_is_refused_before_parsing() -> None:
    text = "a: " + "x" * serveconfig.MAX_LENGTH
    started = time.perf_counter()
    with pytest.raises(serveconfig.ServeConfigError, match="more than 1572864"):
        serveconfig.serve_config(text)
    assert time.perf_counter() - started < 0.1


def test_each_call_gets_its_own_copy() -> None:
    text = "applications: [{name: a, import_path: m.a}]\n"
    first = serveconfig.serve_config(text)
    first["applications"].clear()
    assert serveconfig.serve_config(text)["applications"] == [{"name": "a", "import_path": "m.a"}]


async def test_a_1_mb_config_is_parsed_off_the_loop_once() -> None:
    text = big_config()
    assert len(text) >= 1_000_000
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await serveconfig.parse_off_loop(text)
    parsed_in = time.perf_counter() - started
    done.set()
    await prober
    assert max(lags) < 0.1, f"the loop stalled {max(lags) * 1000:.0f} ms"
    assert len(lags) > 3
    started = time.perf_counter()
    config = serveconfig.serve_config(text)
    assert time.perf_counter() - started < 0.2 < parsed_in
    assert len(config["applications"]) > 2000


def test_the_parse_cache_is_bounded_in_bytes_not_only_in_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serveconfig, "CACHED_BYTES", 2_000_000)
    texts = [big_config(300_000).replace("app-", f"v{n}-") for n in range(8)]
    for text in texts:
        serveconfig.serve_config(text)
    kept = [t for t in texts if t in serveconfig._results]
    held = sum(len(t) + len(serveconfig._results[t][0]) for t in kept)
    assert held <= 2_000_000
    assert kept == texts[-len(kept) :]  # the most recent are kept
    assert texts[-1] in serveconfig._results
