"""Operator scripts' ``Authorization: Token <key>``, looked up by its hash: for DRF, and for the
dashboard's JSON views (``token_or_login_required``)."""
import functools

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts.tokens import operator_token_user
from teams.errors import ErrorCode, TeamError


class OperatorTokenAuthentication(TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key):
        try:
            user = operator_token_user(token=key)
        except UnicodeEncodeError:  # a lone surrogate is no token
            user = None
        if user is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        return (user, None)


def token_or_login_required(view):
    """A JSON view a browser reads with its session and a script with
    ``Authorization: Token <operator token>``.

    With an ``Authorization`` header the token decides: a valid operator token
    (any signed-in person's, viewer or operator) is the request's user; anything
    else answers 401 ``UNAUTHENTICATED`` as JSON, never the login page. Without
    one it is ``login_required``: a browser without a session goes to log in."""
    browser_view = login_required(view)

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return browser_view(request, *args, **kwargs)
        try:  # DRF's header parsing (it reads only request.META); None: not a Token header
            found = OperatorTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            found = None
        user = found[0] if found else None
        if user is None:
            refusal = TeamError(
                ErrorCode.UNAUTHENTICATED,
                "Send 'Authorization: Token <operator token>' (manage.py operator_token), or sign in.",
            )
            return JsonResponse(
                refusal.as_wire(), status=refusal.http_status, headers={"WWW-Authenticate": 'Token realm="steerboard"'}
            )
        request.user = user
        return view(request, *args, **kwargs)

    return wrapped
