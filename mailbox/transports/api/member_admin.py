"""Operator REST for a member's end of life (mailbox/members/lifecycle.py): revoke its tokens, retire it."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from mailbox.members import lifecycle
from mailbox.transports.api.operators import _Api
from mailbox.transports.api.permissions import CanReadTeam, IsOperator


class MemberTokensRevokeView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT, summary="Revoke every token of a member")
    def post(self, request, team, member):
        revoked = lifecycle.member_tokens_revoke(team_id=self.team().pk, name=member)
        return Response({"member": member, "revoked": revoked})


class MemberRetireView(_Api):
    permission_classes = [CanReadTeam, IsOperator]

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT, summary="Retire a teammate: its tokens stop working")
    def post(self, request, team, member):
        retired, revoked = lifecycle.member_retire(team_id=self.team().pk, name=member)
        return Response({"member": retired.name, "status": retired.status, "revoked": revoked})
