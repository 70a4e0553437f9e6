"""Bearer tokens for members and hosts: random, shown once, stored as SHA-256.

A member token's lifecycle (docs/operations.md, "Token lifecycle"):

- *issued* tokens (team_create's Lead token, ``manage.py member_token``) live
  until revoked (``manage.py member_token --revoke``, the operator REST revoke,
  or retiring the member);
- *start* tokens are minted for a host's ``start`` frame. A member has at most
  one: the next start for the member revokes the earlier one (the host hands
  the new token to the session it runs, agents/host.py), so host reconnects and
  repeated starts never pile up live tokens.

Revoking deletes the token's row; the caller also drops it from the process's
lookup cache (mailbox/lifecycle.py).
"""
import hashlib
import secrets

MEMBER_PREFIX = "sbm_"
HOST_PREFIX = "sbh_"


def token_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def start_token_create(*, member) -> tuple[str, list[str]]:
    """A new start token for ``member``, revoking its earlier start tokens.
    Answers (the token, the hashes revoked)."""
    from teams.models import MemberToken, TokenKind

    revoked = list(
        MemberToken.objects.filter(member_id=member.pk, kind=TokenKind.START).values_list("token_hash", flat=True)
    )
    if revoked:
        MemberToken.objects.filter(token_hash__in=revoked).delete()
    token = token_new(MEMBER_PREFIX)
    MemberToken.objects.create(member_id=member.pk, token_hash=token_hash(token), kind=TokenKind.START)
    return token, revoked


def member_tokens_delete(*, member_id: int) -> list[str]:
    """Delete every token of a member; answers their hashes."""
    from teams.models import MemberToken

    hashes = list(MemberToken.objects.filter(member_id=member_id).values_list("token_hash", flat=True))
    MemberToken.objects.filter(token_hash__in=hashes).delete()
    return hashes
