"""Operator REST: teams, their messages, retries and human prompts. Thin: parse, call, render."""
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import OperatorTokenAuthentication
from mailbox import selectors
from mailbox.engine import delivery, lead_log, queue_adapter
from mailbox.engine.budget import budget_of
from mailbox.members import asks, lifecycle, usage
from mailbox.members.budget import team_budget_set
from mailbox.message_query import MessageFilterIn, MessageListIn
from mailbox.models import AskState, MessageState
from mailbox.plumbing import wire
from mailbox.transports.api.permissions import CanReadTeam, IsOperator, MemberBearerAuthentication
from teams import selectors as team_selectors
from teams import services as team_services
from teams.errors import ErrorCode, TeamError
from teams.models import Team


class ClientJSONParser(JSONParser):
    """DRF's JSON parser on wire.json_loads: the agents' API's refusals (nesting,
    NUL, lone surrogates, numbers out of range) as a 400 VALIDATION_ERROR."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = (stream.read() if limit is None else stream.read(limit + 1)) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")  # 413, errors.py
        try:
            return wire.json_loads(raw)
        except TeamError as exc:
            raise ParseError(exc.message)
        except ValueError as exc:
            raise ParseError(f"The body is not valid JSON: {exc}")


class _Api(APIView):
    authentication_classes = [OperatorTokenAuthentication, MemberBearerAuthentication, SessionAuthentication]
    permission_classes = [CanReadTeam]
    parser_classes = [ClientJSONParser, FormParser, MultiPartParser]

    def team(self) -> Team:
        return team_selectors.team_get(name=self.kwargs["team"])


class TeamCreateIn(serializers.Serializer):
    name = serializers.CharField(max_length=63)


class TeamsView(_Api):
    def get_permissions(self):
        return [IsOperator()] if self.request.method == "POST" else [CanReadTeam()]

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="List teams", operation_id="teams_list")
    def get(self, request):
        return Response({"teams": [{"team": t.name, "created_at": t.created_at} for t in team_selectors.team_list()]})

    @extend_schema(request=TeamCreateIn, responses={201: OpenApiTypes.OBJECT}, summary="Create a team with its Lead")
    def post(self, request):
        data = TeamCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        team, lead, lead_token, host_token = team_services.team_create(name=data.validated_data["name"])
        return Response(
            {"team": team.name, "lead": {"name": lead.name, "token": lead_token}, "host_token": host_token}, status=201
        )


class TeamHostTokenRotateView(_Api):
    def get_permissions(self):
        return [IsOperator()]

    @extend_schema(
        request=None,
        responses={201: OpenApiTypes.OBJECT},
        summary="Give a team a new host token (shown once); hosts connected with the old one are disconnected",
        operation_id="team_host_token_rotate",
    )
    def post(self, request, team):
        found = self.team()
        return Response({"team": found.name, "host_token": lifecycle.team_host_token_rotate(team=found)}, status=201)


class TeamDetailView(_Api):
    @extend_schema(responses=OpenApiTypes.OBJECT, summary="A team's roster with message counts, and its board")
    def get(self, request, team):
        return Response(usage.team_summary(team=self.team()))


FILTER_PARAMETERS = [
    OpenApiParameter("target", str, description="the target member's name"),
    OpenApiParameter("sender", str, description="the sender member's name"),
    OpenApiParameter("state", str, enum=MessageState.values),
    OpenApiParameter("thread", str, description="a thread id: the root message and its replies"),
    OpenApiParameter("q", str, description="text in the body (case-insensitive)"),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="queued at or after"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="queued before"),
]


class MessagesView(_Api):
    @extend_schema(
        parameters=[*FILTER_PARAMETERS, OpenApiParameter("cursor", str), OpenApiParameter("limit", int)],
        responses=OpenApiTypes.OBJECT,
        summary="A team's messages with their delivery state, newest first, filtered",
        operation_id="team_messages_list",
    )
    def get(self, request, team):
        query = MessageListIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        page, next_cursor = selectors.message_list(
            team=self.team(),
            cursor=query.validated_data.get("cursor") or None,
            limit=query.validated_data["limit"],
            **query.filters(),
        )
        return Response({"messages": [selectors.message_out(m) for m in page], "next_cursor": next_cursor})


class MessageDetailView(_Api):
    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        summary="One message with its trace: every Lead-log event in order, and the history entry that delivered it",
        operation_id="team_message_trace",
    )
    def get(self, request, team, message_id):
        message = selectors.message_get(team=self.team(), message_id=message_id)
        return Response({**selectors.message_out(message), **lead_log.message_trace(message=message)})


class TeamRetryView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(
        request=None,
        parameters=FILTER_PARAMETERS,
        responses=OpenApiTypes.OBJECT,
        summary="Run admission again for every undelivered message of the team, or of a filtered selection",
    )
    def post(self, request, team):
        query = MessageFilterIn(data={**request.query_params.dict(), **_body_dict(request)})
        query.is_valid(raise_exception=True)
        filters = query.filters()
        if filters["state"] == MessageState.DELIVERED:
            return Response({"retried": 0})
        messages = selectors.messages_undelivered(team=self.team(), **filters)
        return Response({"retried": delivery.messages_retry(messages=messages, by=request.user.get_username())})


def _body_dict(request) -> dict:
    """The filters a body names: none for no body, else it is an object (JSON or a form).
    Anything else (``[1, 2]``, ``"x"``, ``null``) is refused rather than read as no
    filter at all, which would select the whole team."""
    data = request.data
    if isinstance(data, Mapping):
        return dict(data.items())
    raise TeamError(
        ErrorCode.VALIDATION_ERROR,
        'The body is empty or a JSON object of filters, e.g. {"target": "coder"}; nothing was retried.',
    )


class MessageRetryView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT, summary="Run admission again for an undelivered message")
    def post(self, request, team, message_id):
        message = selectors.message_get(team=self.team(), message_id=message_id)
        delivery.messages_retry(messages=[message], by=request.user.get_username())
        message = selectors.message_get(team=self.team(), message_id=message_id)
        return Response({"message": selectors.message_out(message)})


class TargetRetryView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT, summary="Run admission again for all of a target's undelivered messages")
    def post(self, request, team, member):
        found = team_selectors.member_get(team_id=self.team().pk, name=member)
        if found is None:
            raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {member!r} on this team.")
        admission = delivery.target_retry(target=found, by=request.user.get_username())
        return Response(
            {
                "target": found.name,
                "target_status": admission.target_status if admission else found.status,
                "admitted": admission.admitted if admission else [],
                "error": admission.error if admission else "",
            }
        )


class PromptIn(serializers.Serializer):
    target = serializers.CharField(max_length=63)
    content = serializers.CharField(max_length=65536, trim_whitespace=False)


class PromptsView(_Api):
    def get_permissions(self):
        return [CanReadTeam(), IsOperator()] if self.request.method == "POST" else [CanReadTeam()]

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="Human prompts of a team, newest first")
    def get(self, request, team):
        return Response({"prompts": [selectors.prompt_out(p) for p in selectors.prompts_latest(team=self.team())]})

    @extend_schema(request=PromptIn, responses={201: OpenApiTypes.OBJECT}, summary="Send a human prompt (Queue adapter)")
    def post(self, request, team):
        data = PromptIn(data=request.data)
        data.is_valid(raise_exception=True)
        prompt = queue_adapter.prompt_submit(
            team_id=self.team().pk,
            target_name=data.validated_data["target"],
            author=request.user,
            content=data.validated_data["content"],
        )
        return Response({"prompt": selectors.prompt_out(prompt)}, status=201)


class BudgetIn(serializers.Serializer):
    tokens = serializers.IntegerField(min_value=1, max_value=10**15, allow_null=True)


class TeamBudgetView(_Api):
    def get_permissions(self):
        return [CanReadTeam(), IsOperator()] if self.request.method in ("PUT", "POST") else [CanReadTeam()]

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="The team's token budget and what its models used")
    def get(self, request, team):
        return Response(budget_of(team_id=self.team().pk).out())

    @extend_schema(
        request=BudgetIn, responses=OpenApiTypes.OBJECT,
        summary="Set the team's token budget (null: the server's default); raising it lets what waited go on",
    )
    def put(self, request, team):
        data = BudgetIn(data=_body_dict(request))
        data.is_valid(raise_exception=True)
        return Response(
            team_budget_set(team=self.team(), tokens=data.validated_data["tokens"], by=request.user.get_username())
        )

    post = put


class MessageCancelView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(
        request=None, responses=OpenApiTypes.OBJECT,
        summary="Cancel a message not yet delivered: it is never pushed or replayed again (409 once delivered)",
    )
    def post(self, request, team, message_id):
        message = selectors.message_get(team=self.team(), message_id=message_id)
        delivery.message_cancel(message=message, by=request.user.get_username())
        return Response({"message": selectors.message_out(selectors.message_get(team=self.team(), message_id=message_id))})


class AsksIn(serializers.Serializer):
    state = serializers.ChoiceField(choices=AskState.values, required=False)


class AsksView(_Api):
    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=AskState.values)], responses=OpenApiTypes.OBJECT,
        summary="The team's ask_human questions, oldest first (pending: what waits for a person)",
        operation_id="team_asks_list",
    )
    def get(self, request, team):
        query = AsksIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        found = selectors.asks_of(team=self.team(), state=query.validated_data.get("state"))
        return Response({"asks": [selectors.ask_out(a) for a in found]})


class AskAnswerIn(serializers.Serializer):
    decision = serializers.CharField(required=False, allow_blank=True, max_length=64)
    answer = serializers.CharField(required=False, allow_blank=True, max_length=asks.MAX_ANSWER_CHARS,
                                   trim_whitespace=False)
    comment = serializers.CharField(required=False, allow_blank=True, max_length=asks.MAX_COMMENT_CHARS,
                                    trim_whitespace=False)


class AskAnswerView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(
        request=AskAnswerIn, responses=OpenApiTypes.OBJECT,
        summary="Answer an ask: its decision (one of its options) and/or words; the first answer wins (409 after)",
        operation_id="team_ask_answer",
    )
    def post(self, request, team, ask_id):
        data = AskAnswerIn(data=_body_dict(request))
        data.is_valid(raise_exception=True)
        found = asks.ask_answer(
            team_id=self.team().pk, ask_id=ask_id, decision=data.validated_data.get("decision") or None,
            answer=data.validated_data.get("answer", ""), comment=data.validated_data.get("comment", ""),
            by=request.user.get_username(),
        )
        return Response({"ask": selectors.ask_out(found)})
