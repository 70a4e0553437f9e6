"""Command line: python -m agents host|run.

    export STEERBOARD_TOKEN=HOST_TOKEN     # or a member token for run
    python -m agents host --server http://127.0.0.1:8000 --model keyless
    python -m agents run  --server http://127.0.0.1:8000 --model keyless|echo|package.module:Class

The token comes from STEERBOARD_TOKEN: a token given with --token is in the
process's command line, which every user of the machine can read (ps).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys

from agents.host import Host, HostRefused
from agents.registry import model_factory
from agents.session import AgentSession, SessionRefused

TOKEN_ENV = "STEERBOARD_TOKEN"

DESCRIPTION = "Run a team's host, or one agent session, against a Steerboard server."
EPILOG = (
    f"The token is read from the environment variable {TOKEN_ENV}. --token still works, but a token "
    "in the command line can be read by every user of the machine (ps, /proc); prefer the variable."
)


def _model(spec: str):
    """argparse type: the model factory, or a clear error for a name that is not one."""
    try:
        return model_factory(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("host", "run the team's host: start sessions the server asks for"),
        ("run", "run one agent session by hand"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        p.add_argument("--server", required=True, help="http://HOST:PORT of the Steerboard server")
        who = "the host token" if name == "host" else "a member token"
        p.add_argument("--token", help=f"{who} (default: ${TOKEN_ENV}; a token here is visible in ps)")
        p.add_argument(
            "--model",
            default="keyless",
            type=_model,
            metavar="keyless|echo|package.module:Class",
            help="the model: keyless (default), echo, or any model class, built with the member's name",
        )
        p.add_argument(
            "--step-delay",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="the keyless model waits this long before each step, so a person can watch it (default 0)",
        )
        p.add_argument("--max-backoff", type=float, default=2.0, help="longest pause between reconnects (s)")
        p.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=0,
            help="-v: the session's events (steers, turns, entries); -vv: every HTTP request too",
        )
        if name == "host":
            p.add_argument("--state", help="a file where the host keeps the members it runs, to run them again after a restart")
        if name == "run":
            p.add_argument("--no-resume", action="store_true", help="do not rebuild the context from the history")
    return parser


def _factory(args):
    if args.step_delay < 0:
        raise SystemExit("python -m agents: --step-delay cannot be negative")
    if not args.step_delay:
        return args.model
    from agents.keyless import KeylessModel

    if args.model is not KeylessModel:
        raise SystemExit("python -m agents: --step-delay paces the keyless model only")
    return functools.partial(KeylessModel, step_delay=args.step_delay)


async def _main(args, token: str) -> int:
    factory = _factory(args)
    if args.command == "host":
        runner = Host(args.server, token, factory, max_backoff=args.max_backoff, state_path=args.state)
    else:
        runner = AgentSession(
            args.server, token, model_factory=factory, resume=not args.no_resume, max_backoff=args.max_backoff
        )
    main = asyncio.ensure_future(runner.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main.cancel)
    try:
        await main
    except asyncio.CancelledError:
        return 0
    except (HostRefused, SessionRefused) as exc:
        print(f"agents: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        parser.error(f"no token: set {TOKEN_ENV} (or pass --token, which ps shows to every user)")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.verbose == 1:
        # -v is about the session, not the transport: httpx's one line per request waits for -vv.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(_main(args, token))


if __name__ == "__main__":
    sys.exit(main())
