"""Who is an operator: a staff user or a member of the ``operators`` group (viewers are neither)."""
from django.contrib.auth.models import Group

OPERATORS_GROUP = "operators"


def is_operator(user) -> bool:
    """May act (prompt, retry, revoke, manage members); any other signed-in user may only watch.
    A member's bearer token is never an operator: its principal (mailbox/transports/api/permissions.MemberPrincipal)
    is an authenticated AnonymousUser, not a user."""
    if not getattr(user, "is_authenticated", False) or user.is_anonymous:
        return False
    return bool(user.is_staff or user.groups.filter(name=OPERATORS_GROUP).exists())


def operator_role_set(*, user, operator: bool) -> None:
    """Make ``user`` an operator, or a viewer (``operator=False``)."""
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    if operator:
        user.groups.add(group)
    else:
        user.groups.remove(group)
