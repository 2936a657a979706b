"""The sandbox path holds under pressure: well over a thousand connections held on the
sandbox gate's socket (what every sandbox's relay connects to), each a request whose
headers never end, and hangar answers `/healthz` in well under a second all the while.

hangar runs as its own process with 1,024 open files, soft and hard (the common default
soft limit that ran out), and a header deadline longer than the test, so that what
protects it is the gate's budget: the limit less a reserve hangar keeps for itself."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

from app.datadir import gate_dir
from app.web.sandbox_gate import gate_connection_budget
from tests.e2e.conftest import wait_until

HELD = 1200
HALF_SENT = b"POST /model/sb-x/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: hgm_"


def healthz_seconds(url: str) -> float:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as answer:
            assert answer.status == 200
    except OSError:
        return float("inf")
    return time.perf_counter() - started


def test_healthz_answers_while_sandboxes_hold_over_a_thousand_connections(world):
    hangar = world.start_hangar(process=True, open_files=1024,
                                settings={"sandbox_gate_header_timeout_seconds": 600})
    path = str(gate_dir(world.settings.data_dir) / "proxy.sock")
    times: list[float] = []
    flooding = threading.Event()
    flooding.set()

    def probe() -> None:  # /healthz as a person or a load balancer asks, all through
        while flooding.is_set():
            times.append(healthz_seconds(hangar.url))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    held: list[socket.socket] = []
    try:
        for _ in range(HELD):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)  # blocking: waits while the gate's backlog is full
            sock.settimeout(10)
            try:
                sock.sendall(HALF_SENT)
            except OSError:  # the gate was full: it closed this one at once
                pass
            held.append(sock)
        time.sleep(1)  # and held, while /healthz is asked
        flooding.clear()
        prober.join()
        # Every ask answered (hangar ran out of no file), and most of them at once; the
        # slowest come during the burst of connections, and a loaded machine's scheduler
        # is no part of what this holds (measured: median 3-6 ms, the slowest 0.2-1 s).
        assert len(times) >= 10 and max(times) < 3, times
        assert sorted(times)[len(times) // 2] < 0.25, times
        metrics = urllib.request.urlopen(f"{hangar.url}/metrics", timeout=10).read().decode()
        refused = [line for line in metrics.splitlines()
                   if line.startswith('hangar_sandbox_gate_refusals_total{reason="gate_full"}')]
        # The gate kept to its budget and closed the rest at once, counted.
        assert refused and float(refused[0].split()[-1]) >= HELD - gate_connection_budget(1024)
    finally:
        flooding.clear()
        for sock in held:
            sock.close()
    wait_until(lambda: healthz_seconds(hangar.url) < 0.5, 30, "a quick /healthz")
    log = world.hangar.log_path.read_text()
    assert log.count("Traceback") == 0 and log.count("Too many open files") <= 1, log[-3000:]
