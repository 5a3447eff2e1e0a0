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
import gc
import os
import pathlib
import ssl

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


async def test_close_aborts_a_cancelled_watchs_tls_shutdown(tmp_path: pathlib.Path) -> None:
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(pair.cert, pair.key)
    server_transports: list[asyncio.Transport] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + chunk)  # fmt: skip
        await writer.drain()
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # never reads the client's close_notify
        server_transports.append(transport)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ssl)
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
        await asyncio.sleep(0.2)  # the graceful shutdown is under way, and stays so
        assert client_connections_to(port) == 1
        await c.close()
        assert client_connections_to(port) == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for transport in server_transports:
            transport.abort()
        server.close()
        await server.wait_closed()


async def test_a_shutdown_ended_by_the_servers_data_logs_no_error(tmp_path: pathlib.Path) -> None:
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(pair.cert, pair.key)
    writers: list[asyncio.StreamWriter] = []
    serving: list[asyncio.Task[None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        serving.append(asyncio.current_task())  # type: ignore[arg-type]
        await reader.readuntil(b"\r\n\r\n")
        writers.append(writer)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        writer.transport.pause_reading()  # so it never sees the client's close_notify
        while not writer.is_closing():  # events, also after the client's close_notify
            writer.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
            await asyncio.sleep(0.01)

    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ssl)
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
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.3)  # the server's events meet the client's close_notify
        await c.close()
        assert client_connections_to(port) == 0
        del task
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        assert not [m for m in reported if "never retrieved" in m], reported
    finally:
        loop.set_exception_handler(previous)
        for writer in writers:
            writer.transport.abort()
        await asyncio.gather(*serving, return_exceptions=True)
        server.close()
        await server.wait_closed()
