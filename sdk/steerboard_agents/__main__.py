"""Command line: python -m steerboard_agents host|run.

    export STEERBOARD_TOKEN=HOST_TOKEN     # or a member token for run
    python -m steerboard_agents host --server http://127.0.0.1:8000 --model keyless
    python -m steerboard_agents run  --server http://127.0.0.1:8000 --model keyless|echo|openai:MODEL|anthropic:MODEL|package.module:Class
    python -m steerboard_agents host --server ... --model lead=anthropic:MODEL --model '*=openai:MODEL'

The token comes from STEERBOARD_TOKEN: a token given with --token is in the
process's command line, which every user of the machine can read (ps). So do
the vendors' keys: OPENAI_API_KEY, ANTHROPIC_API_KEY (sdk/steerboard_agents/registry.py).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from steerboard_agents import tracing
from steerboard_agents.host import Host, HostRefused
from steerboard_agents.registry import NAMES, VendorOptions, model_check, models_choose
from steerboard_agents.session import AgentSession, SessionRefused

TOKEN_ENV = "STEERBOARD_TOKEN"

DESCRIPTION = "Run a team's host, or one agent session, against a Steerboard server."
EPILOG = (
    f"The token is read from the environment variable {TOKEN_ENV}. --token still works, but a token "
    "in the command line can be read by every user of the machine (ps, /proc); prefer the variable."
)


def _model(value: str) -> str:
    """argparse type: one --model value, checked as far as it can be before the other options are read."""
    try:
        return model_check(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("cannot be negative")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m steerboard_agents", description=DESCRIPTION, epilog=EPILOG)
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
            action="append",
            type=_model,
            metavar="[MEMBER=]NAME",
            help=f"the model: {NAMES} (a model class is built with the member's name); "
            "MEMBER=NAME for one member, a bare NAME (or *=NAME) for everyone else; repeatable "
            "(default: keyless)",
        )
        vendors = p.add_argument_group("openai: and anthropic: models (their SDKs' own variables are the defaults)")
        vendors.add_argument("--openai-base-url", metavar="URL", help="an OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI's)")
        vendors.add_argument("--openai-api-key", metavar="KEY", help="(default: $OPENAI_API_KEY; a key here is visible in ps)")
        vendors.add_argument("--anthropic-base-url", metavar="URL", help="(default: $ANTHROPIC_BASE_URL, else Anthropic's)")
        vendors.add_argument("--anthropic-api-key", metavar="KEY", help="(default: $ANTHROPIC_API_KEY; a key here is visible in ps)")
        vendors.add_argument(
            "--model-retries",
            type=_count,
            metavar="N",
            help="how often the SDK sends a request again after a 429, an overload or a 5xx, waiting as the "
            "vendor's retry-after says (default 4); then the turn ends with reason error",
        )
        vendors.add_argument("--max-tokens", type=_count, metavar="N", help="the longest answer (default: anthropic 4096, openai the server's)")
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


def _factory(args, parser: argparse.ArgumentParser):
    """The members' models, built now: a missing key or a clash is a usage error before anything runs."""
    if args.step_delay < 0:
        raise SystemExit("python -m steerboard_agents: --step-delay cannot be negative")
    options = VendorOptions(
        openai_base_url=args.openai_base_url,
        openai_api_key=args.openai_api_key,
        anthropic_base_url=args.anthropic_base_url,
        anthropic_api_key=args.anthropic_api_key,
        max_retries=args.model_retries,
        max_tokens=args.max_tokens or None,
    )
    try:
        choice = models_choose(args.model, options)
    except ValueError as exc:
        parser.error(f"argument --model: {exc}")
    if not args.step_delay:
        return choice
    try:
        return choice.paced(args.step_delay)
    except ValueError as exc:
        raise SystemExit(f"python -m steerboard_agents: {exc}")


async def _main(args, factory) -> int:
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
    parser = _parser()
    args = parser.parse_args(argv)
    args.token = args.token or os.environ.get(TOKEN_ENV, "")
    if not args.token:
        parser.error(f"no token: set {TOKEN_ENV} (or pass --token, which ps shows to every user)")
    factory = _factory(args, parser)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.verbose == 1:
        # -v is about the session, not the transport: httpx's one line per request waits for -vv.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # the vendors' SDKs' HTTP client
    tracing.configure()  # the sessions' spans, when the OTEL_* variables ask for them
    return asyncio.run(_main(args, factory))


if __name__ == "__main__":
    sys.exit(main())
