"""`fakehub` alone: serve on a port, make an App, print how to reach it, run until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import signal
import tempfile
import threading
from pathlib import Path

from fakehub.testing import running_fakehub


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="A local stand-in for GitHub (REST, git, webhooks)."
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where repositories and App keys go (default: a new temp dir)")
    parser.add_argument("--app-name", default="hangar", help="name of the App to create")
    parser.add_argument("--webhook-url", default=None, help="where the App's webhooks go")
    return parser


def main(argv: list[str] | None = None, prog: str = "fakehub") -> int:
    args = _parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="fakehub-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with running_fakehub(data_dir, port=args.port) as hub:
        app = hub.create_app(args.app_name, webhook_url=args.webhook_url)
        secret_path = hub.write_webhook_secret(app.id, data_dir / "apps" / f"{app.slug}.secret")
        print(f"fakehub serving at {hub.base_url}", flush=True)
        print(f"  REST API:        {hub.api_url}")
        print(f"  App id:          {app.id} ({app.slug}, bot {app.bot_login})")
        print(f"  App private key: {app.private_key_path}")
        print(f"  webhook secret:  {secret_path}")
        print(f"  data dir:        {data_dir}")
        print("Ctrl-C stops it.", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
