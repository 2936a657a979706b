"""`hangar` on the command line: serve, backup, demo, fakehub, doctor, app-secret."""

from __future__ import annotations

import argparse
import sys

from app.settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fakehub"]:
        # fakehub parses its own options (--port, --help, ...): hand them over untouched.
        from fakehub.cli import main as fakehub_main

        return fakehub_main(argv[1:], prog="hangar fakehub")
    parser = argparse.ArgumentParser(
        prog="hangar", description="A GitHub App that runs coding agents in sandboxes."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the GitHub App (webhooks, proxy, API)")
    serve.add_argument("--host", help="address to listen on (HANGAR_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (HANGAR_PORT)")
    serve.add_argument("--rebuild", action="store_true",
                       help="start without the database and recover hangar's open work "
                            "from what it wrote on GitHub (docs/operations.md)")

    backup = sub.add_parser("backup", help="write a consistent copy of hangar's database, "
                                           "also while it serves")
    backup.add_argument("path", metavar="PATH", help="the copy's file, or a directory for it")

    move = sub.add_parser("migrate-store", help="copy every row of hangar's SQLite database "
                                                "into an empty PostgreSQL database, checked")
    move.add_argument("--to", required=True, metavar="POSTGRESQL_URL",
                      help="postgresql://user:password@host/dbname; it must hold no rows")

    setup = sub.add_parser("setup", help="register hangar's GitHub App from a local page "
                                         "(GitHub's App manifest flow)")
    setup.add_argument("--host", help="address to listen on (HANGAR_HOST)")
    setup.add_argument("--port", type=int, help="port to listen on (HANGAR_PORT)")

    demo = sub.add_parser("demo", help="the whole loop against a local GitHub stand-in")
    from app.demo import add_arguments

    add_arguments(demo)

    sub.add_parser("fakehub", help="run the local GitHub stand-in alone "
                                   "(hangar fakehub --help lists its options)")

    doctor = sub.add_parser("doctor", help="check what protects a repository's default branch")
    doctor.add_argument("repo", metavar="OWNER/REPO")

    env = sub.add_parser("env", help="environment builds: list, show, roll back, unpin")
    from app.envbuilds import add_env_arguments

    add_env_arguments(env)

    sub.add_parser("mcp", help="an MCP server on stdio for orchestrator agents "
                              "(HANGAR_API_URL, HANGAR_API_TOKEN)")

    secret = sub.add_parser("app-secret", help="print the Kubernetes Secret the manifests "
                                               "read the App from (kubectl apply -f -)")
    secret.add_argument("--name", default="hangar-app", help="the Secret's name")
    secret.add_argument("--namespace", default="hangar", help="its namespace")

    token = sub.add_parser("token", help="API tokens with scopes: create, list, revoke")
    from app.web.access import add_token_arguments

    add_token_arguments(token)

    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    if args.command == "setup":
        return setup_command(args)
    if args.command == "backup":
        return backup_command(args)
    if args.command == "migrate-store":
        return migrate_store_command(args)
    if args.command == "demo":
        from app.demo import run_demo

        return run_demo(args)
    if args.command == "mcp":
        from app.web.mcp import main as mcp_main

        return mcp_main()
    if args.command == "token":
        from app.web.access import token_command

        return token_command(args, load_settings())
    if args.command == "env":
        from app.envbuilds import env_command

        return env_command(args, load_settings())
    if args.command == "app-secret":
        from app.appsecret import app_secret_command

        return app_secret_command(load_settings(), name=args.name, namespace=args.namespace)
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
    settings = load_settings(host=args.host, port=args.port)
    if not data_dir_usable(settings):
        return 2
    if not settings.app_configured:
        register_app(settings)
        settings = load_settings(host=args.host, port=args.port)
    try:
        settings.check_for_serving()
    except SettingsError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    from app.startup import check_before_serving

    findings = check_before_serving(settings)
    for finding in findings:
        print(f"hangar: {finding.sentence}", file=sys.stderr)
    if any(finding.fatal for finding in findings):
        return 2
    from app.database import DatabaseError
    from app.datadir import check_history, request_rebuild
    from app.store import Store

    shared = settings.database != settings.db_path
    try:
        if shared:  # the rebuild owed is said in the database, to every replica
            store = Store(settings.database)
            try:
                start = store.check_shared_history(rebuild=args.rebuild)
            finally:
                store.close()
        else:
            start = check_history(settings, rebuild=args.rebuild)
    except (SettingsError, DatabaseError) as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    if not shared and (start != "existing" or args.rebuild):
        # A new database: what hangar wrote on GitHub before (if anything) comes back.
        request_rebuild(settings.data_dir)
    # The application is imported once its settings are known good: a refusal is quick.
    from aiohttp import web

    from app import logs
    from app.wiring import create_app

    logs.configure(settings.log_level)
    app = create_app(settings)
    app.on_startup.append(_freeze_startup_objects)
    web.run_app(app, host=settings.host, port=settings.port, print=None)
    return 0


async def _freeze_startup_objects(_app: object) -> None:
    """What hangar built to start (its modules, models, schemas: ~100,000 objects) lives
    as long as the process: the collector stops walking it. A full collection then scans
    what deliveries and steps made since, in milliseconds instead of the ~100 ms a pause
    took that every webhook in flight waited for."""
    import gc

    gc.collect()
    gc.freeze()


def backup_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.datadir import backup_database

    settings = load_settings()
    if settings.database != settings.db_path:
        print("hangar: HANGAR_DATABASE_URL is set: hangar's rows are in PostgreSQL, which "
              "pg_dump backs up while hangar serves (pg_dump --format=custom --file=PATH "
              "\"$HANGAR_DATABASE_URL\"; docs/operating.md)", file=sys.stderr)
        return 2
    try:
        target, size = backup_database(settings.db_path, Path(args.path))
    except SettingsError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    print(f"hangar: copied {settings.db_path} to {target} ({size / 2**20:.1f} MB, "
          "checked with SQLite's quick_check)")
    return 0


def migrate_store_command(args: argparse.Namespace) -> int:
    """Move hangar from its SQLite file to PostgreSQL: every row copied in one
    transaction, read back and compared; never over a database that holds rows."""
    from app.database import DatabaseError, SqliteDatabase, describe, is_postgresql, open_database
    from app.migrations import copy_database

    settings = load_settings()
    if not is_postgresql(args.to):
        print("hangar: --to takes a postgresql://user:password@host/dbname URL",
              file=sys.stderr)
        return 2
    if not settings.db_path.exists():
        print(f"hangar: there is no database at {settings.db_path}: set HANGAR_DATA_DIR to "
              "the data directory of the hangar to move", file=sys.stderr)
        return 2
    source = SqliteDatabase(settings.db_path)
    try:
        target = open_database(args.to)
    except DatabaseError as exc:
        source.close()
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    try:
        counts = copy_database(source, target)
    except DatabaseError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 1
    finally:
        source.close()
        target.close()
    print(f"hangar: copied {sum(counts.values())} rows of {len(counts)} tables from "
          f"{settings.db_path} to the {describe(args.to)}, and compared the copy with the "
          "file. Start hangar with HANGAR_DATABASE_URL set to it; keep hangar.db until it "
          "serves.")
    return 0


def setup_command(args: argparse.Namespace) -> int:
    settings = load_settings(host=args.host, port=args.port)
    if settings.app_configured:
        print(f"hangar setup: an App is configured already (HANGAR_APP_ID={settings.app_id}); "
              "unset it and use an empty HANGAR_DATA_DIR to register another", file=sys.stderr)
        return 2
    if not data_dir_usable(settings):
        return 2
    register_app(settings)
    return 0


def data_dir_usable(settings: Settings) -> bool:
    from app.datadir import check_data_dir

    try:
        check_data_dir(settings.data_dir, settings.db_path)
    except SettingsError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return False
    return True


def register_app(settings: Settings) -> None:
    import asyncio

    from app.web.setup import serve_until_registered

    info = asyncio.run(serve_until_registered(settings))
    print(f"hangar: registered the GitHub App {info['slug']} (id {info['id']}); saved in "
          f"{info['path']}.\nInstall it: {info['install_url']}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
