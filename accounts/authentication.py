"""DRF authentication for operator scripts: ``Authorization: Token <key>``, looked up by its hash."""
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts.tokens import operator_token_user


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
