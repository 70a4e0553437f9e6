"""Operator REST tokens (``Authorization: Token <key>``): random, shown once, stored as SHA-256 only."""
from django.conf import settings
from django.db import models


class OperatorToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when the token is revoked (operator_token --revoke); a revoked token authenticates nobody.
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"token of {self.user} ({'revoked' if self.revoked_at else 'live'})"
