"""The systemd service notification protocol (``sd_notify``), spoken directly.

systemd passes ``NOTIFY_SOCKET`` to a ``Type=notify`` service: the path of a unix datagram
socket, or an abstract socket written with a leading ``@``. Each notification is one datagram of
newline-separated ``KEY=VALUE`` assignments (``READY=1``, ``STATUS=...``, ``STOPPING=1``,
``RELOADING=1``, ``WATCHDOG=1``). Without ``NOTIFY_SOCKET`` (started by hand, in a container)
every call is a no-op that returns False, so callers never need to know how they were started.

Typical use by the daemon::

    notifier = Notifier.from_environment()
    notifier.ready("registered with containerd, 12 containers synchronized")
    notifier.watchdog()  # WATCHDOG=1; daemon.liveness calls it only while the daemon is live
    ...
    notifier.stopping()
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Mapping

__all__ = [
    "Notifier",
    "NotifyError",
    "encode",
    "notify",
    "ready",
    "reloading",
    "status",
    "stopping",
    "watchdog",
    "watchdog_interval",
]

_log = logging.getLogger("nri_plrm.sdnotify")

_KEY = re.compile(r"[A-Z][A-Z0-9_]*\Z")


class NotifyError(ValueError):
    """A notification or a ``NOTIFY_SOCKET``/``WATCHDOG_USEC`` value that breaks the protocol."""


def _address(raw: str) -> str:
    """The socket address for ``NOTIFY_SOCKET``: a filesystem path or an abstract name."""
    if "\0" in raw:
        raise NotifyError(f"NOTIFY_SOCKET: {raw!r}: must not contain a NUL character")
    if raw.startswith("/"):
        return raw
    if raw.startswith("@") and len(raw) > 1:
        return "\0" + raw[1:]
    raise NotifyError(
        f"NOTIFY_SOCKET: {raw!r}: must be an absolute path or an abstract name starting with '@'"
    )


def encode(fields: Mapping[str, str]) -> bytes:
    """One notification datagram from ``{KEY: value}``; values may not contain newlines."""
    if not fields:
        raise NotifyError("notification: {}: needs at least one KEY=VALUE field")
    lines = []
    for key, value in fields.items():
        if not _KEY.match(key):
            raise NotifyError(f"notification key: {key!r}: must match [A-Z][A-Z0-9_]*")
        if "\n" in value:
            raise NotifyError(f"notification {key}: {value!r}: must not contain a newline")
        lines.append(f"{key}={value}")
    return ("\n".join(lines) + "\n").encode()


def _one_line(text: str) -> str:
    """Status text squeezed onto one line (the protocol separates fields by newlines)."""
    return " ".join(text.split())


class Notifier:
    """Sends notifications to the socket systemd named; a no-op when it named none."""

    def __init__(
        self,
        socket_path: str | None,
        *,
        watchdog_usec: int | None = None,
    ) -> None:
        self._address = _address(socket_path) if socket_path else None
        if watchdog_usec is not None and watchdog_usec <= 0:
            raise NotifyError(f"WATCHDOG_USEC: {watchdog_usec}: must be a positive integer")
        self._watchdog_usec = watchdog_usec

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """A notifier for what systemd passed in the environment (``os.environ`` by default).

        The watchdog is armed only when ``WATCHDOG_USEC`` is set and ``WATCHDOG_PID`` is unset or
        names this process, as ``sd_watchdog_enabled`` decides.
        """
        env = os.environ if environ is None else environ
        raw_usec = env.get("WATCHDOG_USEC", "")
        usec: int | None = None
        if raw_usec:
            try:
                usec = int(raw_usec)
            except ValueError:
                raise NotifyError(
                    f"WATCHDOG_USEC: {raw_usec!r}: must be a positive integer"
                ) from None
            pid = env.get("WATCHDOG_PID", "")
            if pid and pid != str(os.getpid()):
                usec = None
        return cls(env.get("NOTIFY_SOCKET") or None, watchdog_usec=usec)

    @property
    def enabled(self) -> bool:
        """True when systemd asked for notifications."""
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds within which systemd expects ``WATCHDOG=1``; None when there is no watchdog."""
        if self._watchdog_usec is None or self._address is None:
            return None
        return self._watchdog_usec / 1_000_000

    def notify(self, fields: Mapping[str, str]) -> bool:
        """Send one notification; True when it was delivered, False when disabled or it failed.

        Delivery failures are logged, never raised: a service must not die because its
        supervisor went away. Malformed fields raise ``NotifyError`` (a programming error).
        """
        payload = encode(fields)
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall(payload)
        except OSError as exc:
            _log.warning("sd_notify to %r failed: %s", self._address.replace("\0", "@", 1), exc)
            return False
        return True

    def ready(self, status_text: str | None = None) -> bool:
        """Tell systemd start-up is complete (``READY=1``), with an optional status line."""
        fields = {"READY": "1"}
        if status_text is not None:
            fields["STATUS"] = _one_line(status_text)
        return self.notify(fields)

    def status(self, text: str) -> bool:
        """Set the free-form status line ``systemctl status`` shows."""
        return self.notify({"STATUS": _one_line(text)})

    def reloading(self) -> bool:
        """Tell systemd a configuration reload started; call ``ready()`` when it is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify({"RELOADING": "1", "MONOTONIC_USEC": str(usec)})

    def stopping(self, status_text: str | None = None) -> bool:
        """Tell systemd the service is shutting down (``STOPPING=1``)."""
        fields = {"STOPPING": "1"}
        if status_text is not None:
            fields["STATUS"] = _one_line(status_text)
        return self.notify(fields)

    def watchdog(self) -> bool:
        """Keep the watchdog fed (``WATCHDOG=1``); a no-op without a watchdog."""
        if self.watchdog_interval is None:
            return False
        return self.notify({"WATCHDOG": "1"})


def _default() -> Notifier:
    return Notifier.from_environment()


def notify(fields: Mapping[str, str]) -> bool:
    """Send ``fields`` to ``$NOTIFY_SOCKET``; False when unset or undeliverable."""
    return _default().notify(fields)


def ready(status_text: str | None = None) -> bool:
    """``READY=1`` (and ``STATUS=``) to ``$NOTIFY_SOCKET``."""
    return _default().ready(status_text)


def status(text: str) -> bool:
    """``STATUS=`` to ``$NOTIFY_SOCKET``."""
    return _default().status(text)


def reloading() -> bool:
    """``RELOADING=1`` to ``$NOTIFY_SOCKET``."""
    return _default().reloading()


def stopping(status_text: str | None = None) -> bool:
    """``STOPPING=1`` to ``$NOTIFY_SOCKET``."""
    return _default().stopping(status_text)


def watchdog() -> bool:
    """``WATCHDOG=1`` to ``$NOTIFY_SOCKET`` when systemd armed a watchdog for this process."""
    return _default().watchdog()


def watchdog_interval() -> float | None:
    """The watchdog interval in seconds systemd set for this process, or None."""
    return _default().watchdog_interval
