"""Starts the real smdb-server binary (``SMDB_SERVER_BIN``, else ``target/debug/smdb-server``
of this repository) on a free port with a temp data dir."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import threading
import time
from typing import Iterator, List, Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
TESTDATA = REPO / "clients" / "testdata"


def server_bin() -> pathlib.Path:
    env = os.environ.get("SMDB_SERVER_BIN")
    path = pathlib.Path(env) if env else REPO / "target" / "debug" / "smdb-server"
    if not path.is_file():
        pytest.fail(f"no server binary at {path}: build it (cargo build --bin smdb-server) or set SMDB_SERVER_BIN")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp: pathlib.Path, extra: str = "", network: str = "") -> None:
        self.dir = tmp
        self.port = free_port()
        self.config = tmp / "smdb.toml"
        self.config.write_text(
            f'[network]\nbind_addr = "127.0.0.1:{self.port}"\n{network}'
            + f'[storage]\ndata_dir = "{tmp / "data"}"\nfsync = "never"\n[metrics]\nenabled = false\n[http]\nenabled = false\n'
            + extra
        )
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        log = open(self.dir / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(server_bin()), "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=log,
        )
        ready = threading.Event()
        lines: List[str] = []

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace")
                lines.append(line)
                if "listening on" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60):
            self.kill()
            raise RuntimeError(f"server did not start: {lines} {(self.dir / 'server.log').read_text()}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.kill()


@pytest.fixture
def make_server(tmp_path: pathlib.Path) -> Iterator:
    started: List[Server] = []

    def make(extra: str = "", network: str = "") -> Server:
        d = tmp_path / f"s{len(started)}"
        d.mkdir()
        s = Server(d, extra, network)
        started.append(s)
        return s

    yield make
    for s in started:
        s.kill()


ORDER = {
    "states": ["new", "paid", "shipped", "cancelled"],
    "initial": "new",
    "final": ["shipped", "cancelled"],
    "transitions": [
        {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
        {"from": "paid", "event": "ship", "to": "shipped"},
        {"from": ["new", "paid"], "event": "cancel", "to": "cancelled"},
    ],
}
TICK = {"states": ["s"], "initial": "s", "transitions": [{"from": "s", "event": "tick", "to": "s"}]}
