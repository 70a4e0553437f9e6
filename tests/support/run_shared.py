"""What the workers of one test run share: built once, by whichever worker needs it first,
under a lock, and removed by the controller when the run ends.

Under pytest-xdist every worker of a run has the run's id (``PYTEST_XDIST_TESTRUNUID``;
tests/conftest.py makes the controller choose it, so that it knows it too). A live
environment's database is a copy of a migrated template (tests/support/live.py), and a
``manage.py migrate`` costs seconds of CPU: the run's workers share one template per
database server rather than migrating one each. Without pytest-xdist there is no run id and
each test process keeps its own, as before. Everything lives in one folder,
``<tmp>/steerboard-run-<id>/``: the locks, the SQLite template, and the list of the
PostgreSQL templates the controller drops."""
import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
_POSTGRES_LIST = "postgres-templates"


def folder(run_id: str = RUN_ID) -> Path:
    return Path(tempfile.gettempdir()) / f"steerboard-run-{run_id}"


@contextlib.contextmanager
def lock(key: str):
    """Held by one process of the run at a time (an flock on a file of the run's folder)."""
    path = folder()
    path.mkdir(exist_ok=True)
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    with open(path / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def postgres_template_name() -> str:
    return f"steerboard_tpl_{RUN_ID[:16]}"


def postgres_drop_at_end(url: str) -> None:
    """Record a PostgreSQL database the controller drops at the end of the run: a template, or
    a live environment's database once its test is done. On PostgreSQL 15 a ``DROP DATABASE``
    forces an immediate checkpoint of the whole cluster (every dirty page written and synced):
    6 to 14 s on the run's server while the suite writes (5 Dec), in the dropping test's
    teardown, and every other test's commits waited on the disk meanwhile. At the end nothing
    else writes, and each drop after the first finds little to checkpoint."""
    with lock("postgres drop list"), open(folder() / _POSTGRES_LIST, "a") as f:
        f.write(url + "\n")


def remove(run_id: str) -> None:
    """At the end of the run (the controller): drop the run's PostgreSQL databases (``postgres_drop_at_end``), remove its folder."""
    path = folder(run_id)
    if not path.exists():
        return
    listed = path / _POSTGRES_LIST
    for url in (listed.read_text().split() if listed.exists() else []):
        try:
            import psycopg

            server, name = url.rsplit("/", 1)
            with psycopg.connect(server + "/postgres", autocommit=True, connect_timeout=10) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception:
            pass
    shutil.rmtree(path, ignore_errors=True)
