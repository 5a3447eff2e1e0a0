"""What the webhook server reads before a handler sees a review: which bodies, how many at
once, and at what cost. The callers are unauthenticated (anything that reaches the port),
so every body is held to :class:`Limits` and refused as early, and as cheaply, as it can be.

Each refusal is a :class:`Refused` (HTTP status, message, ``Retry-After``). In the order
:mod:`runtime.webhook.server` applies them:

1. **Headers** (:func:`check_headers`, before anything is read): ``Content-Type`` must be
   ``application/json`` (400), a ``Content-Length`` must be given (411: the API server
   always sends one) and be at most :attr:`Limits.max_body_bytes` (413).
2. **A slot** (:class:`Lanes`): the request then holds a slot until it is answered, from
   reading its body to writing the answer, so that what it reads, parses and hands the
   handler is bounded by the number of slots. A body up to
   :attr:`Limits.small_body_bytes` takes one of :attr:`Limits.small_slots`, a larger one
   one of :attr:`Limits.large_slots`: a flood of large bodies never keeps the small
   reviews of everyday writes waiting. A request waits for a slot at most
   :attr:`Limits.wait` seconds (first come, first served), then is answered 429 with
   ``Retry-After: 1`` - the API server calls webhooks with client-go's REST client, which
   retries such an answer within the webhook's ``timeoutSeconds``.
3. **The first byte** (:func:`check_start`, as the body arrives): a review is a JSON
   object, so the first byte that is not white space must be ``{`` (400). A body of
   ``[{},{},...]`` is refused at its first chunk.
4. **The envelope and the size of the tree** (:func:`check_body`, once the body is read
   within :attr:`Limits.read_timeout` seconds, else 408): the body must hold the review's
   ``"kind": "<kind>"`` and ``"apiVersion": "<apiVersion>"`` (400; a cheap necessary
   condition, :func:`runtime._internal.review.request_of` checks the parsed review), and
   at most :attr:`Limits.max_containers` ``{`` and ``[`` bytes: an upper bound on the
   JSON objects and arrays a parse would build (413).
5. **The parse** (:func:`parse`): ``json.loads`` (400 if it is not JSON, or nests deeper
   than the interpreter's recursion limit).

**Why 4 MiB.** An AdmissionReview carries the object and, on ``UPDATE``, its old version.
What etcd stores is at most 1.5 MiB per object (its request limit), and the API server
reads request bodies of at most 3 MiB; a review of anything storable is under 3 MiB plus
its envelope (a few KiB). 4 MiB leaves room for objects whose JSON is larger than what
etcd holds (built-in kinds are stored as protobuf). controller-runtime accepts 7 MiB;
a ConversionReview may carry several objects, so a server converting long lists may need
a larger :attr:`Limits.max_body_bytes`.

**What a body may cost.** Parsed, JSON takes up to ~28 bytes of heap per byte when it is
all small objects and arrays (``[{},{},...]``: 25), ~13 for short strings, ~8 for
numbers, ~2 for long strings. With at most 200,000 objects and arrays, the costliest
body at the cap that passes the checks is a list of a million short strings: ~52 MiB
(the slowest, a million floats: ~36 MiB and ~0.2 s of parsing). The lanes hold at most
2 such bodies and 16 small ones (at most ~2 MiB each): ~150 MiB in all. What is not
bounded here is the number of connections: each one uploading costs the TLS and HTTP
layers ~1 MiB of buffers while it waits, so keep others from the port (a NetworkPolicy
letting only the API server in). The parse runs on the event loop: ``json``'s C scanner
holds the GIL for a whole parse, so a worker thread would hold the loop as long; what
bounds the stall is what a body may hold. ``hack/bench/webhook_flood.py`` measures a
flood of 100 bodies at the cap: the manager's peak RSS and its loop's stall.

>>> limits = Limits()
>>> check_headers("application/json", 2_000, limits)
>>> check_headers("application/json", None, limits)
Traceback (most recent call last):
runtime.webhook.intake.Refused: 411 a webhook request needs a Content-Length
>>> check_start(b"  [{},{}", 0)
Traceback (most recent call last):
runtime.webhook.intake.Refused: 400 the body is not a JSON object
>>> check_start(b"  ", 0), check_start(b'  {"kind"', 2)
(2, None)
>>> parse(b'{"kind": "Review", "apiVersion": "example.dev/v1"}', "example.dev/v1", "Review",
...       limits)
{'kind': 'Review', 'apiVersion': 'example.dev/v1'}
>>> parse(b'{"kind": "Other"}', "example.dev/v1", "Review", limits)
Traceback (most recent call last):
runtime.webhook.intake.Refused: 400 the body is no example.dev/v1 Review
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator

__all__ = ["Lanes", "Limits", "Refused", "check_body", "check_headers", "check_start", "parse"]

KiB = 1024
MiB = 1024 * KiB
_SPACE = re.compile(rb"[ \t\r\n]*")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """What the webhook server accepts (see the module docstring). Every field states its
    default."""

    max_body_bytes: int = 4 * MiB
    """Largest body read; a larger ``Content-Length`` is answered 413. Default 4 MiB."""
    max_containers: int = 200_000
    """Most ``{`` and ``[`` bytes in a body (an upper bound on the objects and arrays it
    parses into); more is answered 413. Default 200,000."""
    small_body_bytes: int = 64 * KiB
    """Bodies up to this size take a small slot, larger ones a large slot. Default 64 KiB."""
    small_slots: int = 16
    """Small bodies served at once. Default 16."""
    large_slots: int = 2
    """Large bodies served at once. Default 2."""
    wait: float = 2.0
    """Seconds a request waits for a slot before it is answered 429. Default 2."""
    retry_after: int = 1
    """``Retry-After`` seconds of a 429. Default 1."""
    read_timeout: float = 5.0
    """Seconds a body may take to arrive once it holds a slot; then 408. Default 5."""


class Refused(Exception):
    """A request refused with HTTP ``status`` and ``message`` (and ``Retry-After`` seconds
    when given)."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.status} {self.message}"


def check_headers(content_type: str, content_length: int | None, limits: Limits) -> None:
    """Refuse a request by its headers alone (step 1)."""
    if content_type != "application/json":
        raise Refused(400, f"Content-Type must be application/json, got {content_type}")
    if content_length is None:
        raise Refused(411, "a webhook request needs a Content-Length")
    if content_length > limits.max_body_bytes:
        raise Refused(413, f"the body has {content_length} bytes, at most {limits.max_body_bytes}")


def check_start(body: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Step 3 on the ``body`` read so far, white space known up to ``pos``: ``None`` once
    its first other byte is ``{``, else the new ``pos`` (all white space so far);
    :class:`Refused` (400) if that byte is anything else."""
    pos = _SPACE.match(body, pos).end()  # type: ignore[union-attr]  # matches the empty string
    if pos == len(body):
        return pos
    if body[pos] != ord("{"):
        raise Refused(400, "the body is not a JSON object")
    return None


def _field(name: str, value: str) -> re.Pattern[bytes]:
    return re.compile(b'"%s"[ \t\r\n]*:[ \t\r\n]*"%s"' % (name.encode(), re.escape(value.encode())))


def check_body(body: bytes | bytearray, api_version: str, kind: str, limits: Limits) -> None:
    """Step 4: refuse a read body that cannot be a ``kind`` of ``api_version``, or whose
    parse could build more than :attr:`Limits.max_containers` objects and arrays."""
    if _field("kind", kind).search(body) is None or (
        _field("apiVersion", api_version).search(body) is None
    ):
        raise Refused(400, f"the body is no {api_version} {kind}")
    containers = body.count(b"{") + body.count(b"[")
    if containers > limits.max_containers:
        raise Refused(
            413, f"the body has {containers} '{{' and '[' (JSON objects and arrays), "
            f"at most {limits.max_containers}",
        )  # fmt: skip


def parse(body: bytes | bytearray, api_version: str, kind: str, limits: Limits) -> object:
    """Steps 3 to 5 on a whole body: its JSON, or :class:`Refused`."""
    check_start(body, 0)
    check_body(body, api_version, kind, limits)
    try:
        return json.loads(body)
    except RecursionError:
        raise Refused(400, "the body is not JSON: it nests too deeply") from None
    except ValueError as exc:
        raise Refused(400, f"the body is not JSON: {exc}") from None


class Lanes:
    """The slots of step 2: :meth:`slot` holds one for a body of ``length`` bytes."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._small = asyncio.Semaphore(limits.small_slots)
        self._large = asyncio.Semaphore(limits.large_slots)

    @contextlib.asynccontextmanager
    async def slot(self, length: int) -> AsyncIterator[None]:
        """Hold a slot for a body of ``length`` bytes; :class:`Refused` (429) if none is
        free within :attr:`Limits.wait` seconds."""
        lane = self._small if length <= self.limits.small_body_bytes else self._large
        try:
            async with asyncio.timeout(self.limits.wait):
                await lane.acquire()
        except TimeoutError:
            raise Refused(
                429, "too many webhook requests at once; retry",
                retry_after=self.limits.retry_after,
            ) from None  # fmt: skip
        try:
            yield
        finally:
            lane.release()
