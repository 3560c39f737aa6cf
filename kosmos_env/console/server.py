"""Start the console: bind a socket (loopback unless told otherwise), print where and the token, serve.

Binding the socket here, before uvicorn starts, means ``--port 0`` picks a free port and the
printed address is the real one.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys
import threading
from pathlib import Path
from typing import Sequence

TOKEN_ENV = "KOSMOS_CONSOLE_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def make_token() -> str:
    """The token from $KOSMOS_CONSOLE_TOKEN (at least 16 characters) or a fresh random one."""
    given = os.environ.get(TOKEN_ENV)
    if given is not None:
        if len(given) < 16:
            raise ValueError(f"${TOKEN_ENV} must hold at least 16 characters")
        return given
    return secrets.token_urlsafe(24)


class ConsoleServer:
    """uvicorn serving the console app on an already bound socket (in this thread or another)."""

    def __init__(
        self,
        roots: Sequence[str | Path],
        *,
        host: str = "127.0.0.1",
        port: int = 8321,
        allow_remote: bool = False,
        token: str | None = None,
        reference: str | Path | None = None,
        poll_seconds: float = 1.0,
        analysis_options: dict | None = None,
        log_level: str = "warning",
    ):
        import uvicorn

        from kosmos_env.console.app import create_app

        loopback = is_loopback(host)
        if not loopback and not allow_remote:
            raise ValueError(
                f"--host {host} would expose the console beyond this machine; add --allow-remote to do so "
                "on purpose (anyone who can reach the port can read every campaign)"
            )
        self.token = token or make_token()
        self.sock = bind_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/"
        note = f"bound to {host} only" if loopback else f"listening on {host} (remote access allowed)"
        self.app = create_app(
            roots,
            self.token,
            reference=reference,
            loopback_only=loopback,
            bind_note=note,
            poll_seconds=poll_seconds,
            analysis_options=analysis_options,
        )
        config = uvicorn.Config(self.app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.loopback = loopback
        self._thread: threading.Thread | None = None

    def banner(self) -> str:
        where = (
            f"listening on {self.host} only: other machines cannot reach it (use --host ADDR --allow-remote "
            "to expose it)"
            if self.loopback
            else f"listening on {self.host}: reachable from other machines; anyone who can reach it reads every campaign"
        )
        return (
            f"Kosmos-Env console: {self.url}\n{where}\n"
            f"token for the cancel control (paste it in the page): {self.token}"
        )

    def serve(self) -> None:
        self.server.run(sockets=[self.sock])

    def start_in_thread(self) -> "ConsoleServer":
        self._thread = threading.Thread(target=self.serve, daemon=True, name="kosmos-console")
        self._thread.start()
        import time

        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        if not self.server.started:
            raise RuntimeError("the console did not start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()


def serve(roots: Sequence[str | Path], **kwargs) -> None:
    server = ConsoleServer(roots, **kwargs)
    print(server.banner(), file=sys.stderr, flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass
