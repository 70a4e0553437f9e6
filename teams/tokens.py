"""Bearer tokens for members and hosts: random, shown once, stored as SHA-256."""
import hashlib
import secrets

MEMBER_PREFIX = "sbm_"
HOST_PREFIX = "sbh_"


def token_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
