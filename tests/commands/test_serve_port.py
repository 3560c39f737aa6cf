"""A second `kosmos-env serve` on a port already taken says so in one line and suggests --port 0."""

from __future__ import annotations

import socket

from kosmos_env.cli import main
from tests.conftest import requires_extra


@requires_extra("console")
def test_a_busy_port_is_one_line_suggesting_port_zero(tmp_path, capsys):
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)  # what a console already serving holds
        port = taken.getsockname()[1]
        assert main(["serve", str(tmp_path), "--port", str(port)]) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0] and "--port 0" in err[0], err
