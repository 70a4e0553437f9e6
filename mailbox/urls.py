from django.conf import settings
from django.urls import path

from mailbox.plumbing import sqlcount
from mailbox.transports.api import export, inbox, member_admin, operators, protocol, tools

urlpatterns = [
    path("tools", tools.tools_list, name="tools-list"),
    path("tools/policy", inbox.tools_policy, name="tools-policy"),  # before tools/<name>; POST stays a tool call
    path("tools/<str:name>", tools.tool_invoke, name="tool-invoke"),
    path("protocol/frames.json", protocol.frames, name="protocol-frames"),  # public, cacheable (docs/protocol.md)
    path("session/history", tools.session_history, name="session-history"),
    path("session/entries", inbox.session_entries, name="session-entries"),
    path("inbox", inbox.inbox, name="inbox"),
    path("teams", operators.TeamsView.as_view(), name="teams"),
    path("teams/<str:team>", operators.TeamDetailView.as_view(), name="team-detail"),
    path("teams/<str:team>/export", export.team_export, name="team-export"),  # NDJSON, operators (mailbox/operations/archive.py)
    path("teams/<str:team>/messages", operators.MessagesView.as_view(), name="team-messages"),
    path("teams/<str:team>/messages/<str:message_id>", operators.MessageDetailView.as_view(), name="message-detail"),
    path("teams/<str:team>/retry", operators.TeamRetryView.as_view(), name="team-retry"),
    path(
        "teams/<str:team>/host_token/rotate",
        operators.TeamHostTokenRotateView.as_view(),
        name="team-host-token-rotate",
    ),
    path(
        "teams/<str:team>/messages/<str:message_id>/retry",
        operators.MessageRetryView.as_view(),
        name="message-retry",
    ),
    path(
        "teams/<str:team>/messages/<str:message_id>/cancel",
        operators.MessageCancelView.as_view(),
        name="message-cancel",
    ),
    path("teams/<str:team>/members/<str:member>/retry", operators.TargetRetryView.as_view(), name="target-retry"),
    path(
        "teams/<str:team>/members/<str:member>/tokens/revoke",
        member_admin.MemberTokensRevokeView.as_view(),
        name="member-tokens-revoke",
    ),
    path("teams/<str:team>/members/<str:member>/retire", member_admin.MemberRetireView.as_view(), name="member-retire"),
    path("teams/<str:team>/prompts", operators.PromptsView.as_view(), name="team-prompts"),
    path("teams/<str:team>/asks", operators.AsksView.as_view(), name="team-asks"),
    path("teams/<str:team>/asks/<str:ask_id>/answer", operators.AskAnswerView.as_view(), name="ask-answer"),
    path("teams/<str:team>/budget", operators.TeamBudgetView.as_view(), name="team-budget"),
]

if settings.STEERBOARD.get("COUNT_SQL"):
    # bench/engine.py reads the process's SQL counts here; absent (404) unless asked for.
    urlpatterns.append(path("debug/sql", sqlcount.view, name="debug-sql"))
