#!/usr/bin/env python
"""Django's command-line utility for Steerboard."""
import os
import secrets
import sys
from pathlib import Path


def _local_secret_key() -> None:
    """A local run needs no setting: without SECRET_KEY, `manage.py demo` (on any
    database) and every command on the embedded default (no DATABASE_URL) use one
    generated key, kept in var/secret-key, so logins survive a restart and the
    commands and the demo agree. With DATABASE_URL set (a deployment) nothing is
    generated: SECRET_KEY is required there (config/settings.py), as it is for
    `daphne config.asgi:application` everywhere."""
    if os.environ.get("SECRET_KEY"):
        return
    if os.environ.get("DATABASE_URL") and sys.argv[1:2] != ["demo"]:
        return
    var = Path(os.environ.get("STEERBOARD_VAR_DIR", Path(__file__).resolve().parent / "var"))
    var.mkdir(parents=True, exist_ok=True)
    path = var / "secret-key"
    legacy = var / "demo-secret-key"  # its name before every local command shared it
    if not path.exists() and legacy.exists():
        legacy.replace(path)
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another command made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(50))
    os.environ["SECRET_KEY"] = path.read_text().strip()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    _local_secret_key()
    if sys.argv[1:2] == ["demo"] and not {"-h", "--help"} & set(sys.argv):
        # Loading Django takes seconds on a slow machine: say so before it starts.
        print("Steerboard demo: loading Django ...", flush=True)
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A missing or wrong setting is the operator's to fix: one line, not a traceback.
        print(f"manage.py: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
