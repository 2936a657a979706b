"""Servers for a bench, each in a process of its own, as they run for real: on one event
loop with the measuring client, a server's work would be charged to the client's time.

    with ServerProcesses() as servers:
        port = servers.start(_origin, mib)  # _origin(mib, ready) puts its port on ready
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


class ServerProcesses:
    """`start(target, *args)` runs target(*args, ready) in a daemon process and returns
    what it puts on `ready` (its port or URL) once it serves; leaving the block ends them all."""

    def __init__(self) -> None:
        self.processes: list[multiprocessing.Process] = []

    def start(self, target: Callable[..., None], *args: Any) -> Any:
        ready: multiprocessing.Queue = multiprocessing.Queue()
        process = multiprocessing.Process(target=target, args=(*args, ready), daemon=True)
        process.start()
        self.processes.append(process)
        return ready.get(timeout=30)

    def __enter__(self) -> ServerProcesses:
        return self

    def __exit__(self, *_exc: object) -> None:
        for process in self.processes:
            process.terminate()
            process.join()
