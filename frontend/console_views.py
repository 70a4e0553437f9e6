"""The operator console's pages: a team's messages with filters, and one message's trace.

Thin like frontend/views.py: parse the query as the operator API does (the one
definition of the message query, mailbox/message_query.py: the same names and
checks as ``GET /api/v1/teams/<team>/messages``), call a selector, render.
"""
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from frontend import selectors
from frontend.views import _team_or_404, _viewer, content_security_policy
from mailbox import selectors as mailbox_selectors
from mailbox.engine import lead_log
from mailbox.message_query import MessageListIn
from mailbox.models import MessageState
from mailbox.transports.api.errors import error_json
from teams import selectors as team_selectors
from teams.errors import ErrorCode, TeamError

FILTERS = ("state", "sender", "target", "thread", "q", "since", "until")


def _page_of(request, team) -> tuple[dict, list[dict], str | None, dict]:
    """(the filters as given, the page's messages, the next cursor, errors by field)."""
    given = {key: request.GET.get(key, "") for key in (*FILTERS, "cursor")}
    query = MessageListIn(data={k: v for k, v in given.items() if v})
    if not query.is_valid():
        return given, [], None, {k: " ".join(str(e) for e in v) for k, v in query.errors.items()}
    try:
        messages, next_cursor = selectors.team_messages_page(
            team=team, cursor=query.validated_data.get("cursor") or None, filters=query.filters()
        )
    except TeamError as exc:
        return given, [], None, {"cursor": exc.message}
    return given, messages, next_cursor, {}


@require_GET
@login_required
@content_security_policy
def team_messages(request, team):
    """A team's messages, newest first, filtered by the query string (which a reload keeps), live."""
    found = _team_or_404(team)
    given, messages, next_cursor, errors = _page_of(request, found)
    me = _viewer(request)
    filters = {k: v for k, v in given.items() if k != "cursor" and v}
    older = f"?{urlencode({**filters, 'cursor': next_cursor})}" if next_cursor else None
    data = {"team": found.name, "me": me, "filters": filters, "cursor": given["cursor"] or None,
            "messages": messages, "next_cursor": next_cursor, "errors": errors}
    return render(
        request,
        "frontend/team_messages.html",
        {
            "team": found,
            "page_data": data,
            "messages": messages,
            "next_cursor": next_cursor,
            "given": given,
            "errors": errors,
            "older": older,
            "states": MessageState.values,
            "members": [m.name for m in team_selectors.member_list(team_id=found.pk)],
            "me": me,
            "page": "messages",
        },
        status=400 if errors else 200,
    )


@require_GET
@login_required
@never_cache
def team_messages_json(request, team):
    """What the messages page re-reads when the team's doorbell rings (same query string)."""
    found = _team_or_404(team)
    given, messages, next_cursor, errors = _page_of(request, found)
    if errors:
        return error_json(TeamError(ErrorCode.VALIDATION_ERROR, "Bad filter.", fields=errors))
    return JsonResponse({"team": found.name, "messages": messages, "next_cursor": next_cursor, "me": _viewer(request)})


@require_GET
@login_required
@content_security_policy
def message_trace(request, team, message_id):
    """One message's history: every Lead-log event in order, and the entry that delivered it."""
    found = _team_or_404(team)
    try:
        message = mailbox_selectors.message_get(team=found, message_id=message_id)
    except TeamError:
        raise Http404(f"No message {message_id!r} in team {found.name}.")
    trace = lead_log.message_trace(message=message)
    return render(
        request,
        "frontend/message_trace.html",
        {
            "team": found,
            "message": selectors.message_card(message),
            "events": trace["events"],
            "now": trace["now"],
            "delivered_by": trace["delivered_by"],
            "me": _viewer(request),
            "page": "trace",
        },
    )


@require_GET
@login_required
def member_messages(request, team, member):
    """The member-messages page is now the team messages page filtered by target."""
    found = _team_or_404(team)
    if team_selectors.member_get(team_id=found.pk, name=member) is None:
        raise Http404(f"No member named {member!r}.")
    query = {"target": member, **{k: request.GET[k] for k in ("state", "cursor") if request.GET.get(k)}}
    return redirect(f"{reverse('team-messages-page', args=[found.name])}?{urlencode(query)}")
