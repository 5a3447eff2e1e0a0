"""``Client.close`` returns only once every connection's socket is closed, a cancelled
watch's included. Over TLS a cancelled watch closes its connection gracefully: the
client sends close_notify and waits for the server's, for up to 30 s, while the
connector no longer knows the connection. An event loop closed meanwhile (the end of
``asyncio.run``, of a test) leaves the socket open until the garbage collector warns,
in whatever code runs then. Here the server never answers close_notify (it stops
reading after the first event), so only an abort closes the socket. A server that goes
on sending events after the client's close_notify ends the connection with an SSL error,
which is expected and must not reach the loop's exception handler as "never retrieved"
(it did, as an error log, at every Ctrl-C of ``make run``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import pathlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

from runtime import tls
from runtime.client import client as client_
from runtime.client import kubeconfig, resources

CONFIGMAPS = resources.default_registry.for_kind("v1", "ConfigMap")
EVENT = (
    b'{"type":"ADDED","object":{"kind":"ConfigMap",'
    b'"metadata":{"name":"a","resourceVersion":"1"}}}\n'
)


def client_connections_to(port: int) -> int:
    """This process's open TCP connections whose remote end is ``port`` (the client's
    side of each connection to the server, read from ``/proc``)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    lines = pathlib.Path("/proc/self/net/tcp").read_text().splitlines()[1:]
    return sum(
        1
        for fields in map(str.split, lines)
        if int(fields[2].split(":")[1], 16) == port and fields[9] in inodes
    )


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNK = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)


@contextlib.asynccontextmanager
async def cancelled_watch(
    tmp_path: pathlib.Path, serve: Serve
) -> AsyncIterator[tuple[client_.Client, int]]:
    """A TLS server answering with ``serve``, a client watching it until its first event,
    then that watch cancelled; yields the client and the server's port. Afterwards every
    server connection is aborted and its handler awaited."""
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(pair.cert, pair.key)
    handlers: list[tuple[asyncio.Task[None], asyncio.StreamWriter]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append((asyncio.current_task(), writer))  # type: ignore[arg-type]
        await reader.readuntil(b"\r\n\r\n")
        await serve(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ssl)
    port = server.sockets[0].getsockname()[1]
    c = client_.Client(
        kubeconfig.Credentials(host=f"https://127.0.0.1:{port}", ssl_ca_cert=str(ca.cert))
    )
    seen = asyncio.Event()

    async def watch() -> None:
        async for _ in c.watch(CONFIGMAPS, "ns"):
            seen.set()

    task = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(seen.wait(), 10)
        assert client_connections_to(port) == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        yield c, port
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _, writer in handlers:
            writer.transport.abort()
        await asyncio.gather(*(t for t, _ in handlers), return_exceptions=True)
        server.close()
        await server.wait_closed()


async def test_close_aborts_a_cancelled_watchs_tls_shutdown(tmp_path: pathlib.Path) -> None:
    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEADERS + CHUNK)
        await writer.drain()
        writer.transport.pause_reading()  # never reads the client's close_notify

    async with cancelled_watch(tmp_path, serve) as (c, port):
        await asyncio.sleep(0.2)  # the graceful shutdown is under way, and stays so
        assert client_connections_to(port) == 1
        await c.close()
        assert client_connections_to(port) == 0


async def test_a_shutdown_ended_by_the_servers_data_logs_no_error(tmp_path: pathlib.Path) -> None:
    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEADERS)
        writer.transport.pause_reading()  # so it never sees the client's close_notify
        while not writer.is_closing():  # events, also after the client's close_notify
            writer.write(CHUNK)
            await asyncio.sleep(0.01)

    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    try:
        async with cancelled_watch(tmp_path, serve) as (c, port):
            await asyncio.sleep(0.3)  # the server's events meet the client's close_notify
            await c.close()
            assert client_connections_to(port) == 0
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        assert not [m for m in reported if "never retrieved" in m], reported
    finally:
        loop.set_exception_handler(previous)
