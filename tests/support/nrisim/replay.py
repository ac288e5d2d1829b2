"""Replay recorded runtime traffic, byte for byte, against a live plugin over a unix socket.

The replaying side writes every recorded ``rx`` frame verbatim and, wherever the recording has a
``tx`` message from the plugin (a reply, or a request such as RegisterPlugin), waits until the
live plugin has sent the message with the same conn id, stream id and type. It returns everything
the plugin wrote, for byte-level checks.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from nri_plrm.ttrpc.codec import TYPE_REQUEST, Message, MuxDecoder
from nrisim.capture import Frame, frames


@dataclass
class Replay:
    """What the plugin sent while a recording was replayed to it."""

    folder: str
    tx: bytes
    messages: list[Message]
    frames: list[Frame] = field(default_factory=list)

    def reply(self, stream_id: int, conn: int = 1) -> Message:
        """The plugin's reply on ``conn`` for ``stream_id``."""
        found = [
            m
            for m in self.messages
            if m.conn_id == conn and m.stream_id == stream_id and m.type != TYPE_REQUEST
        ]
        if len(found) != 1:
            raise LookupError(
                f"{self.folder}: {len(found)} replies on conn {conn} stream {stream_id}"
            )
        return found[0]


class _Collector:
    def __init__(self) -> None:
        self.tx = bytearray()
        self.decoder = MuxDecoder()
        self.messages: list[Message] = []
        self.changed = asyncio.Condition()
        self.eof = False

    async def pump(self, reader: asyncio.StreamReader) -> None:
        while True:
            chunk = await reader.read(65536)
            async with self.changed:
                if not chunk:
                    self.eof = True
                    self.changed.notify_all()
                    return
                self.tx += chunk
                self.messages += self.decoder.feed(chunk)
                self.changed.notify_all()

    def has(self, conn: int, sid: int, mtype: int) -> bool:
        return any(
            m.conn_id == conn and m.stream_id == sid and m.type == mtype for m in self.messages
        )

    async def wait_for(self, conn: int, sid: int, mtype: int, timeout: float) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.eof or self.has(conn, sid, mtype)), timeout
            )
        if not self.has(conn, sid, mtype):
            raise AssertionError(
                f"plugin closed the connection before sending conn {conn} stream {sid} type {mtype}"
            )


async def replay_capture(
    folder: str, socket_path: str, plugin_task_factory: object, timeout: float = 5.0
) -> Replay:
    """Listen on ``socket_path``, start the plugin, and replay ``folder``'s runtime side.

    ``plugin_task_factory`` is a zero-argument callable returning the plugin's coroutine (for
    example ``stub.run``); it is started once the socket exists and must finish after the
    replaying side closes the connection.
    """
    recorded = frames(folder)
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future()
    )

    async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not accepted.done():
            accepted.set_result((reader, writer))

    server = await asyncio.start_unix_server(on_accept, socket_path)
    assert callable(plugin_task_factory)
    plugin = asyncio.ensure_future(plugin_task_factory())
    collector = _Collector()
    try:
        reader, writer = await asyncio.wait_for(accepted, timeout)
        pump = asyncio.ensure_future(collector.pump(reader))
        requests_sent: list[tuple[int, int]] = []
        for fr in recorded:
            if fr.direction == "rx":
                writer.write(fr.raw)
                await writer.drain()
                requests_sent += [
                    (fr.conn, m["sid"]) for m in fr.index["msgs"] if m["type"] == TYPE_REQUEST
                ]
                continue
            for m in fr.index["msgs"]:
                await collector.wait_for(fr.conn, m["sid"], m["type"], timeout)
        for conn, sid in requests_sent:
            await collector.wait_for(conn, sid, 2, timeout)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        await asyncio.wait_for(pump, timeout)
        await asyncio.wait_for(plugin, timeout)
    finally:
        plugin.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await plugin
        server.close()
        await server.wait_closed()
    return Replay(folder, bytes(collector.tx), collector.messages, recorded)
