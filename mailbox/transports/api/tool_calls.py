"""``POST /api/v1/tools/<name>`` as a plain ASGI app: the hot path of an agent's REST call.

The same tool call as ``tools.tool_invoke`` (``tools.tool_request``; that view
still answers every other method on the path), without Django's request cycle: no request object,
no ``request_started``/``request_finished`` signals run on a worker thread, no
URL resolver. What the cycle gave these responses is kept: the security headers
that SecurityMiddleware and XFrameOptionsMiddleware add, the upload size limit
(DATA_UPLOAD_MAX_MEMORY_SIZE) and the JSON error shape; the Host, the member
token and the rate were checked at the edge (mailbox/transports/edge.py), which left the
member in the scope.
"""
import logging

from django.conf import settings

from mailbox.plumbing import outage
from mailbox.transports import edge
from mailbox.transports.api.tools import tool_request
from teams.errors import ErrorCode, TeamError

log = logging.getLogger(__name__)


def handles(scope) -> bool:
    """A tool call: POST /api/v1/tools/<name> (GET /api/v1/tools/policy and the rest stay Django's)."""
    return edge.tool_of(scope) is not None


async def app(scope, receive, send) -> None:
    name = edge.tool_of(scope)
    try:
        try:
            body = await edge.body_read(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        except ConnectionResetError:
            return
        result = await tool_request(name=name, scope=scope, body=body)
    except TeamError as exc:
        await edge.respond_json(send, exc.http_status, exc.as_wire())
        return
    except Exception as exc:
        what = outage.noted(exc, "a tool call")
        if what is not None:  # the database (or Redis) is out of reach: not a bug; nothing was stored
            await edge.respond_json(send, 503, outage.unavailable_body(what), edge.unavailable_headers())
            return
        log.exception("tool call %s failed", name)
        failed = TeamError(ErrorCode.SERVER_ERROR, "The server failed; this is a bug.")
        await edge.respond_json(send, failed.http_status, failed.as_wire())
        return
    await edge.respond_json(send, 200, result)
