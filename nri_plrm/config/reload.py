"""Reading the configuration file again (SIGHUP) off the event loop, in bounded time, one reader
at a time, never holding up the daemon's exit.

The reader is one daemon thread running :func:`~nri_plrm.config.file.load_config`. Its work is
bounded before any quadratic step: at most 1 MiB is read, the depth scan
(:mod:`nri_plrm.config.shape`, linear) refuses keys nesting deeper than 32 levels before the TOML
parser sees them, and the did-you-mean hints are looked up for the listed errors only;
``bench/config.py`` measures the slowest such file (``config_1mib_worst_read_ms``). So the reader
always ends, and a reload that stops waiting for it at its deadline leaves no work growing
behind. Until it ends no other reader starts (:attr:`ConfigReader.busy`): a SIGHUP storm runs
one reader at a time, and while it runs the GIL changes hands every 0.5 ms, not 5 ms. A daemon
thread, it never delays the process's exit: SIGTERM during a reload stops the daemon at once.
(The package starts no programs, docs/security.md: the reader is a thread, not a child process.)
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading

from nri_plrm.config.file import load_config
from nri_plrm.config.settings import Config

READ_SWITCH_INTERVAL = 0.0005
"""The interpreter's GIL switch interval while a read runs (5 ms otherwise): the parser is pure
Python, so the event loop's thread, when it wants the GIL back, waits at most this long for it
(CreateContainer p99 during a SIGHUP storm on a 1 MiB file: 7-11 ms, against 19-25 ms)."""


class ReloadTimeout(Exception):
    """The reader did not finish within the reload's deadline."""


class ConfigReader:
    """Reads the configuration file in a thread of its own, one read at a time."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """A read is still running (maybe past the deadline of the reload that started it)."""
        return self._thread is not None and self._thread.is_alive()

    async def load(self, path: str, timeout: float) -> Config:
        """The configuration in ``path``; raises ConfigError, or ReloadTimeout after ``timeout``
        seconds (the read goes on to its bounded end, its result unused)."""
        if self.busy:
            raise RuntimeError("a configuration read is still running")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Config] = loop.create_future()
        done.add_done_callback(_retrieved)

        previous = sys.getswitchinterval()

        def read() -> None:
            try:
                config = load_config(path)
            except Exception as exc:  # every failure goes to the reload
                _settle(loop, done, None, exc)
            else:
                _settle(loop, done, config, None)
            finally:
                sys.setswitchinterval(previous)

        self._thread = threading.Thread(target=read, name="nri-plrm-config-reader", daemon=True)
        sys.setswitchinterval(READ_SWITCH_INTERVAL)
        try:
            self._thread.start()
        except RuntimeError:
            sys.setswitchinterval(previous)
            raise
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except asyncio.TimeoutError:
            raise ReloadTimeout(f"{path}: not read within {timeout:g} s") from None


def _retrieved(done: asyncio.Future[Config]) -> None:
    """Mark the outcome as seen: after a timeout nobody awaits it."""
    if not done.cancelled():
        done.exception()


def _settle(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Config],
    config: Config | None,
    exc: Exception | None,
) -> None:
    """Hand the reader's outcome to the loop (gone already when the daemon stopped meanwhile)."""

    def settle() -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(config)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)
