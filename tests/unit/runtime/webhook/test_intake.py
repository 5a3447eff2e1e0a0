"""``runtime/webhook/intake.py``: the checks on a webhook body's headers and bytes, in the
order the server applies them, and the lanes that bound how many bodies are held (no
server: ``test_server.py`` has them over HTTPS)."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from runtime.webhook import intake

LIMITS = intake.Limits()
REVIEW = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}'


def refusal(call: object, *args: object) -> tuple[int, str]:
    with pytest.raises(intake.Refused) as refused:
        call(*args)  # type: ignore[operator]
    return refused.value.status, refused.value.message


def test_the_headers_are_checked_first() -> None:
    intake.check_headers("application/json", LIMITS.max_body_bytes, LIMITS)
    assert refusal(intake.check_headers, "text/plain", 10, LIMITS) == (
        400, "Content-Type must be application/json, got text/plain"
    )  # fmt: skip
    assert refusal(intake.check_headers, "application/json", None, LIMITS)[0] == 411
    assert refusal(intake.check_headers, "application/json", 4 * 1024 * 1024 + 1, LIMITS) == (
        413, "the body has 4194305 bytes, at most 4194304"
    )  # fmt: skip


def test_the_first_byte_is_checked_across_chunks() -> None:
    pos = intake.check_start(b" \r\n", 0)
    assert pos == 3
    assert intake.check_start(b" \r\n\t {", pos) is None
    assert refusal(intake.check_start, b" \r\n\t [", pos) == (400, "the body is not a JSON object")
    assert refusal(intake.check_start, b"\xef\xbb\xbf{", 0)[0] == 400  # no BOM either


def test_the_envelope_and_the_tree_are_checked_on_the_bytes() -> None:
    intake.check_body(REVIEW, "admission.k8s.io/v1", "AdmissionReview", LIMITS)
    spaced = b'{"kind" :\n "AdmissionReview", "apiVersion":"admission.k8s.io/v1"}'
    intake.check_body(spaced, "admission.k8s.io/v1", "AdmissionReview", LIMITS)
    wrong = (400, "the body is no admission.k8s.io/v1 AdmissionReview")
    for body in (b'{"kind": "AdmissionReview"}', b'{"apiVersion": "admission.k8s.io/v1"}',
                 REVIEW.replace(b"k8s.io/v1", b"k8s.io/v1beta1")):  # fmt: skip
        assert refusal(
            intake.check_body, body, "admission.k8s.io/v1", "AdmissionReview", LIMITS
        ) == wrong  # fmt: skip
    few = intake.Limits(max_containers=3)
    intake.check_body(REVIEW, "admission.k8s.io/v1", "AdmissionReview", few)  # 2: the review's
    many = REVIEW.replace(b'"request": {}', b'"request": {"x": [[]]}')
    assert refusal(intake.check_body, many, "admission.k8s.io/v1", "AdmissionReview", few) == (
        413, "the body has 4 '{' and '[' (JSON objects and arrays), at most 3"
    )  # fmt: skip


def test_parse_answers_the_json_or_refuses_it() -> None:
    assert intake.parse(bytearray(REVIEW), "admission.k8s.io/v1", "AdmissionReview",
                        LIMITS) == {"apiVersion": "admission.k8s.io/v1",
                                    "kind": "AdmissionReview", "request": {}}  # fmt: skip
    cut = REVIEW[:-1]
    status, message = refusal(intake.parse, cut, "admission.k8s.io/v1", "AdmissionReview", LIMITS)
    assert (status, message.startswith("the body is not JSON: ")) == (400, True)
    deep = REVIEW.replace(b'"request": {}', b'"request": ' + b"[" * 50_000 + b"]" * 50_000)
    assert refusal(intake.parse, deep, "admission.k8s.io/v1", "AdmissionReview", LIMITS) == (
        400, "the body is not JSON: it nests too deeply"
    )  # fmt: skip


async def test_lanes_hold_large_and_small_bodies_apart_and_refuse_after_the_wait() -> None:
    limits = intake.Limits(small_slots=1, large_slots=1, wait=0.05)
    lanes = intake.Lanes(limits)
    large = limits.small_body_bytes + 1
    async with lanes.slot(large), lanes.slot(limits.small_body_bytes):  # one of each at once
        with pytest.raises(intake.Refused) as refused:
            async with lanes.slot(large):
                pytest.fail("a second large slot")
        assert (refused.value.status, refused.value.retry_after) == (429, 1)
        with pytest.raises(intake.Refused):
            async with lanes.slot(10):
                pytest.fail("a second small slot")
    # Freed, a slot goes to the waiters in the order they came.
    lanes = intake.Lanes(intake.Limits(large_slots=1, wait=5.0))
    order: list[int] = []

    async def take(n: int) -> None:
        async with lanes.slot(large):
            order.append(n)
            await asyncio.sleep(0.01)

    await asyncio.gather(take(1), take(2), take(3))
    assert order == [1, 2, 3]


def test_the_costliest_body_that_passes_the_checks_parses_into_what_the_docstring_says() -> None:
    # A list of a million short strings: one container, ~13 bytes of heap per byte.
    head = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
    count = (LIMITS.max_body_bytes - len(head) - 3) // 5
    body = head + b"[" + b",".join([b'"ab"'] * count) + b"]}"
    assert len(body) <= LIMITS.max_body_bytes
    tracemalloc.start()
    try:
        parsed = intake.parse(body, "admission.k8s.io/v1", "AdmissionReview", LIMITS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(parsed, dict)
    assert len(parsed["request"]) == count
    assert peak < 56 * 1024 * 1024, peak  # the docstring's ~52 MiB
    # The same body as objects instead is refused on its bytes, before any is built.
    junk = head + b"[" + b",".join([b"{}"] * count) + b"]}"
    assert refusal(intake.check_body, junk, "admission.k8s.io/v1", "AdmissionReview",
                   LIMITS)[0] == 413  # fmt: skip
