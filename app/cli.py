"""`hangar` on the command line: serve, demo, fakehub, doctor."""

from __future__ import annotations

import argparse
import sys

from app.settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hangar", description="A GitHub App that runs coding agents in sandboxes."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the GitHub App (webhooks, proxy, API)")
    serve.add_argument("--host", help="address to listen on (HANGAR_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (HANGAR_PORT)")

    demo = sub.add_parser("demo", help="the whole loop against a local GitHub stand-in")
    from app.demo import add_arguments

    add_arguments(demo)

    fake = sub.add_parser("fakehub", help="run the local GitHub stand-in alone",
                          add_help=False)
    fake.add_argument("rest", nargs=argparse.REMAINDER)

    doctor = sub.add_parser("doctor", help="check what protects a repository's default branch")
    doctor.add_argument("repo", metavar="OWNER/REPO")

    sub.add_parser("mcp", help="an MCP server on stdio for orchestrator agents "
                              "(HANGAR_API_URL, HANGAR_API_TOKEN)")

    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    if args.command == "demo":
        from app.demo import run_demo

        return run_demo(args)
    if args.command == "fakehub":
        from fakehub.cli import main as fakehub_main

        return fakehub_main(args.rest)
    if args.command == "mcp":
        from app.mcp_server import main as mcp_main

        return mcp_main()
    if args.command == "doctor":
        from app.doctor import doctor_command

        return doctor_command(args.repo)
    return 2


def load_settings(**overrides) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def serve_command(args: argparse.Namespace) -> int:
    from aiohttp import web

    from app import logs
    from app.web import create_app

    settings = load_settings(host=args.host, port=args.port)
    try:
        settings.check_for_serving()
    except SettingsError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    web.run_app(create_app(settings), host=settings.host, port=settings.port, print=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
