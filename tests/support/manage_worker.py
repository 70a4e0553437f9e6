"""``manage.py`` for one live environment, in one long-lived process.

A ``manage.py`` run costs more than a second of CPU, nearly all of it Django
starting; end-to-end tests make hundreds of them (teams, tokens, operators).
``LiveEnvironment.manage`` hands each command to this process instead: Django
starts once per environment, and every command runs through ``call_command``
with the same settings, database and output a ``manage.py`` run would have.

Protocol, one JSON line each way: the argument list in, ``{"code", "stdout",
"stderr"}`` out. A command that fails answers the exit code and stderr that
``manage.py`` would have printed (``CommandError: ...``, or a traceback).
"""
import contextlib
import io
import json
import sys
import traceback


def _run(args: list[str]) -> dict:
    from django.core.management import CommandError, call_command
    from django.db import connections

    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        # Commands that print() rather than write to self.stdout land in the answer too.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(f"CommandError: {exc}\n")
        code = exc.returncode
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the test reads the traceback, as from manage.py
        err.write(traceback.format_exc())
        code = 1
    finally:
        # Each command starts from a fresh connection, as its own manage.py run would
        # (the database may have been restarted in between).
        connections.close_all()
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    import django

    django.setup()
    answers = sys.stdout
    for line in sys.stdin:
        answers.write(json.dumps(_run(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
