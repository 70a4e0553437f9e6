"""The settings of the processes a test starts on a LiveEnvironment (tests/support/live.py):
production's ``config.settings`` unchanged but for the password hasher.

Django's default hasher (PBKDF2, a million iterations) costs about a quarter of a
second of CPU for every password set or checked: every operator a test makes and
every sign-in of a browser test. A run made some 150 of them on each backend.
A fast hasher is what Django's testing docs advise; the slow one stays listed,
so a hash made under ``config.settings`` (e.g. by ``manage.py demo``) still checks.
The in-process tests run them too (config/test_settings.py)."""
from config.settings import *  # noqa: F401,F403

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
