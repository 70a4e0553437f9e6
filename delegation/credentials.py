"""Who may call a member's A2A endpoint, and as whom.

Two kinds of bearer token get in (docs/a2a.md, "Who may call"):

- an operator's API token (``manage.py operator_token``; ``sbo_``): the
  operator is the caller and the prompts' author; viewers are refused;
- an A2A client credential (``manage.py a2a_credential``; ``sba_``): named,
  revocable, good only for the teams it names; its prompts' author is the
  user ``<name>@a2a`` made for it.

Member and host tokens are refused: a member talks to its team through the
Team tools, and another team's member has no say here at all.
"""
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from accounts.operators import is_operator
from accounts.tokens import operator_token_user
from delegation.models import A2ACredential
from teams.errors import ErrorCode, TeamError
from teams.models import Team
from teams.tokens import token_hash, token_new

CREDENTIAL_PREFIX = "sba_"
AUTHOR_SUFFIX = "@a2a"


@dataclass(frozen=True)
class Caller:
    """An authenticated A2A caller: the user its prompts are authored by."""

    user_id: int
    name: str
    credential_id: int | None = None


def credential_create(*, name: str, teams: list[str], created_by=None) -> tuple[A2ACredential, str]:
    """A new credential for the named teams; the token is returned once, only its hash is kept."""
    found = list(Team.objects.filter(name__in=teams))
    missing = sorted(set(teams) - {t.name for t in found})
    if missing:
        raise TeamError(ErrorCode.NOT_FOUND, f"No team named {', '.join(missing)}.")
    if not teams:
        raise TeamError(ErrorCode.VALIDATION_ERROR, "Name at least one team the credential is good for.")
    if A2ACredential.objects.filter(name=name).exists():
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"An A2A credential named {name!r} exists already.")
    token = token_new(CREDENTIAL_PREFIX)
    User = get_user_model()
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=f"{name}{AUTHOR_SUFFIX}")
        user.set_unusable_password()
        user.save()
        credential = A2ACredential.objects.create(
            name=name, token_hash=token_hash(token), user=user, created_by=created_by
        )
        credential.teams.set(found)
    return credential, token


def credential_revoke(*, name: str) -> A2ACredential:
    credential = A2ACredential.objects.filter(name=name).first()
    if credential is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No A2A credential named {name!r}.")
    if credential.revoked_at is None:
        credential.revoked_at = timezone.now()
        credential.save(update_fields=["revoked_at"])
    return credential


def caller_for_team(*, token: str, team: Team) -> Caller:
    """The caller a bearer token names, if it may delegate to ``team``; else a TeamError
    (401 ``UNAUTHENTICATED`` for no live token, 403 ``FORBIDDEN`` for one that may not)."""
    if not token:
        raise TeamError(ErrorCode.UNAUTHENTICATED, "Send 'Authorization: Bearer <operator token or A2A credential>'.")
    try:
        digest = token_hash(token)
    except UnicodeEncodeError:  # a lone surrogate is no token
        raise TeamError(ErrorCode.UNAUTHENTICATED, "That token is not valid.") from None
    good_here = A2ACredential.teams.through.objects.filter(a2acredential_id=OuterRef("pk"), team_id=team.pk)
    credential = (
        A2ACredential.objects.filter(token_hash=digest, revoked_at__isnull=True)
        .values("pk", "name", "user_id", "user__username", good=Exists(good_here))
        .first()
    )
    if credential is not None:  # one query, every A2A request: its caller and whether it may call this team
        if not credential["good"]:
            raise TeamError(
                ErrorCode.FORBIDDEN, f"The A2A credential {credential['name']!r} is not good for team {team.name!r}."
            )
        return Caller(user_id=credential["user_id"], name=credential["user__username"], credential_id=credential["pk"])
    user = operator_token_user(token=token)
    if user is not None:
        if not is_operator(user):
            raise TeamError(ErrorCode.FORBIDDEN, "Only operators may delegate to a team; viewers may only watch.")
        return Caller(user_id=user.pk, name=user.get_username())
    from teams.selectors import member_by_token

    if member_by_token(token=token) is not None:
        raise TeamError(
            ErrorCode.FORBIDDEN,
            "A member token does not call A2A endpoints: use an operator token or an A2A credential.",
        )
    raise TeamError(ErrorCode.UNAUTHENTICATED, "That token is unknown or revoked.")
