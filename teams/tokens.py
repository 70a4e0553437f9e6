"""Bearer tokens for members and hosts: random, shown once, stored as SHA-256.

A member token's lifecycle (docs/operations.md, "Token lifecycle"):

- *issued* tokens (team_create's Lead token, ``manage.py member_token``) live
  until revoked (``manage.py member_token --revoke``, the operator REST revoke,
  or retiring the member);
- *start* tokens are minted for a host's ``start`` frame. A member has at most
  one: the next start for the member revokes the earlier one (the host hands
  the new token to the session it runs, sdk/steerboard_agents/host.py), so host reconnects and
  repeated starts never pile up live tokens.

Revoking deletes the token's row and writes it down in ``RevokedToken`` for an hour
(every server process reads the recent ones to close its websockets of those tokens,
mailbox/plumbing/auth.py); the caller also drops it from the process's lookup cache
(mailbox/members/lifecycle.py, mailbox/members/hosts.py).
"""
import hashlib
import secrets
from datetime import timedelta

# How long a revoke stays in RevokedToken: far past the few seconds the processes take to read it.
REVOKED_KEPT = timedelta(hours=1)

MEMBER_PREFIX = "sbm_"
HOST_PREFIX = "sbh_"


def token_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """A token's SHA-256 (hex): the one digest of a bearer token of any kind (member, host,
    operator, A2A credential). What is stored instead of the token, and what the
    process's lookup cache, its open sockets and the token's request bucket are kept
    under (mailbox/plumbing/auth.py, mailbox/plumbing/quota.py). A lone surrogate is hashed as it is,
    never an error (it then matches no token)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def start_token_create(*, member) -> tuple[str, list[str]]:
    """A new start token for ``member``, revoking its earlier start tokens.
    Answers (the token, the hashes revoked)."""
    from teams.models import MemberToken, TokenKind

    revoked = list(
        MemberToken.objects.filter(member_id=member.pk, kind=TokenKind.START).values_list("token_hash", flat=True)
    )
    _revoke(revoked)
    token = token_new(MEMBER_PREFIX)
    MemberToken.objects.create(member_id=member.pk, token_hash=token_hash(token), kind=TokenKind.START)
    return token, revoked


def member_tokens_delete(*, member_id: int) -> list[str]:
    """Delete every token of a member; answers their hashes."""
    from teams.models import MemberToken

    hashes = list(MemberToken.objects.filter(member_id=member_id).values_list("token_hash", flat=True))
    _revoke(hashes)
    return hashes


def _revoke(hashes: list[str]) -> None:
    """Delete these tokens and write their revoke down (dropping the ones older than REVOKED_KEPT)."""
    from django.utils import timezone

    from teams.models import MemberToken, RevokedToken

    if not hashes:
        return
    MemberToken.objects.filter(token_hash__in=hashes).delete()
    now = timezone.now()
    RevokedToken.objects.filter(revoked_at__lt=now - REVOKED_KEPT).delete()
    RevokedToken.objects.bulk_create([RevokedToken(token_hash=h, revoked_at=now) for h in hashes])
