"""Command line: ``python -m agents host|run``.

    python -m agents host --server http://127.0.0.1:8000 --token HOST_TOKEN --model keyless
    python -m agents run  --server http://127.0.0.1:8000 --token MEMBER_TOKEN --model keyless|echo
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from agents.host import Host, HostRefused
from agents.model import model_factory
from agents.session import AgentSession, SessionRefused


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("host", "run the team's host: start sessions the server asks for"),
        ("run", "run one agent session by hand"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--server", required=True, help="http://HOST:PORT of the Steerboard server")
        p.add_argument("--token", required=True, help="the host token (host) or a member token (run)")
        p.add_argument("--model", default="keyless", choices=["keyless", "echo"])
        p.add_argument("--max-backoff", type=float, default=2.0, help="longest pause between reconnects (s)")
        p.add_argument("-v", "--verbose", action="store_true")
        if name == "host":
            p.add_argument("--state", help="a file where the host keeps the members it runs, to run them again after a restart")
        if name == "run":
            p.add_argument("--no-resume", action="store_true", help="do not rebuild the context from the history")
    return parser


async def _main(args) -> int:
    factory = model_factory(args.model)
    if args.command == "host":
        runner = Host(args.server, args.token, factory, max_backoff=args.max_backoff, state_path=args.state)
    else:
        runner = AgentSession(
            args.server, args.token, model_factory=factory, resume=not args.no_resume, max_backoff=args.max_backoff
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
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
