"""A failure answered and counted elsewhere keeps its log line without a traceback
(mailbox/plumbing/log_context.py's ``traceback_left_out``): Django's line for a request
the database's absence failed (answered 503, counted), and the A2A SDK's lines for a
client's envelope it could not parse (answered -32600/-32602). Any other failure keeps
its traceback."""
import logging

import psycopg
import pytest

from delegation.server import build_app


def _logged(caplog, logger: str, message: str, exc: BaseException) -> logging.LogRecord:
    caplog.clear()
    try:
        raise exc
    except BaseException:
        logging.getLogger(logger).error(message, exc_info=True)
    [record] = [r for r in caplog.records if r.name == logger]
    return record


def test_a_request_the_database_failed_is_logged_without_its_traceback_and_a_bug_with_it(caplog):
    # Installed by MailboxConfig.ready, as every process does at start.
    gone = _logged(caplog, "django.request", "Service Unavailable: /api/x", psycopg.OperationalError("refused"))
    assert gone.exc_info is None and gone.getMessage() == "Service Unavailable: /api/x"
    bug = _logged(caplog, "django.request", "Internal Server Error: /api/x", KeyError("oops"))
    assert bug.exc_info is not None and bug.exc_info[0] is KeyError


@pytest.mark.parametrize("message", ["Failed to validate base JSON-RPC request", "Failed to parse request params"])
def test_an_a2a_clients_unparsable_request_is_logged_without_a_traceback(caplog, message):
    build_app()
    build_app()  # installed once, however often the app is built
    logger = "a2a.server.routes.jsonrpc_dispatcher"
    assert len(logging.getLogger(logger).filters) == 1
    record = _logged(caplog, logger, message, ValueError("not JSON-RPC"))
    assert record.exc_info is None
    other = _logged(caplog, logger, "Unhandled exception", ValueError("the server's"))
    assert other.exc_info is not None
