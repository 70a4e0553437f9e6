"""Who may read and act through the operator REST API."""
from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, permissions

from accounts.operators import is_operator
from mailbox.plumbing.auth import bearer_from_headers
from teams.selectors import member_by_token

class MemberPrincipal(AnonymousUser):
    """A request made with a member's bearer token: may read its own team, nothing else."""

    def __init__(self, member):
        super().__init__()
        self.member = member

    @property
    def is_authenticated(self):
        return True


class MemberBearerAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith("bearer "):
            return None
        member = member_by_token(token=bearer_from_headers([("authorization", header)]))
        if member is None:
            from rest_framework.exceptions import AuthenticationFailed

            raise AuthenticationFailed("That bearer token names no member.")
        return MemberPrincipal(member), member

    def authenticate_header(self, request):
        return 'Bearer realm="steerboard"'


class CanReadTeam(permissions.BasePermission):
    """People who are logged in may watch; a member token sees only its own team."""

    message = "You may not read this team."

    def has_permission(self, request, view):
        user = request.user
        if not getattr(user, "is_authenticated", False):
            return False
        team_name = view.kwargs.get("team")
        if isinstance(user, MemberPrincipal):
            return team_name is not None and user.member.team.name == team_name
        return True


class IsOperator(permissions.BasePermission):
    message = "Only operators may do this; ask a staff member to add you to the 'operators' group."

    def has_permission(self, request, view):
        return is_operator(request.user)
