"""Issue, look up and revoke operator REST tokens."""
from django.utils import timezone

from accounts.models import OperatorToken
from teams.tokens import token_hash, token_new

OPERATOR_PREFIX = "sbo_"


def operator_token_create(*, user) -> str:
    """A new token for ``user``; shown once: only its hash is stored."""
    token = token_new(OPERATOR_PREFIX)
    OperatorToken.objects.create(user=user, token_hash=token_hash(token))
    return token


def operator_token_user(*, token: str):
    """The active user a live token names, or None."""
    if not token:
        return None
    row = (
        OperatorToken.objects.select_related("user")
        .filter(token_hash=token_hash(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    return row.user if row is not None else None


def operator_tokens_revoke(*, user) -> int:
    """Revoke every live token of ``user``; answers how many."""
    return OperatorToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())
