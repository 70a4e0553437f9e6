"""``GET /metrics``: the process's Prometheus metrics (mailbox/plumbing/metrics.py), for an operator's
token (``Authorization: Token <operator token>``, or ``Bearer``) or a scraper whose address
STEERBOARD_METRICS_ALLOW lists. Thin: who asks, then the exposition, read on a database thread."""
from django.http import HttpResponse

from accounts.operators import is_operator
from accounts.tokens import operator_token_user
from mailbox.plumbing.db import to_db_thread
from mailbox.plumbing import metrics
from mailbox.transports.api.errors import error_json
from teams.errors import ErrorCode, TeamError


def _operator_of(header: str) -> bool:
    scheme, _, token = header.partition(" ")
    if scheme.lower() not in ("token", "bearer") or not token.strip():
        return False
    try:
        user = operator_token_user(token=token.strip())
    except UnicodeEncodeError:  # a lone surrogate is no token
        return False
    return user is not None and is_operator(user)


async def metrics_view(request):
    if not metrics.enabled():
        return error_json(TeamError(ErrorCode.NOT_FOUND, "Metrics are off (STEERBOARD_METRICS=0)."))
    if request.method != "GET":
        return error_json(TeamError(ErrorCode.METHOD_NOT_ALLOWED, "GET /metrics only."))
    header = request.META.get("HTTP_AUTHORIZATION", "")
    allowed = metrics.scraper_allowed(request.META.get("REMOTE_ADDR", ""))
    if not allowed and not (header and await to_db_thread(_operator_of)(header)):
        refusal = TeamError(
            ErrorCode.UNAUTHENTICATED,
            "Scraping needs an operator's token (Authorization: Token <token>) or an address in STEERBOARD_METRICS_ALLOW.",
        )
        return error_json(refusal, **{"WWW-Authenticate": 'Token realm="steerboard"'})
    body = await to_db_thread(metrics.exposition_text)()
    return HttpResponse(body, content_type=metrics.CONTENT_TYPE)
