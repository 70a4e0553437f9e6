"""Issue 12, item 10: repeated failed sign-ins on the dashboard's /login/ are throttled
(django-axes): after STEERBOARD_LOGIN_FAILURE_LIMIT wrong passwords in a row for one
username from one address, that pair is locked out (429, a page that says so) for the
cool-off, even with the right password; 100 wrong passwords cost the attacker."""
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-enough-password-42"


@pytest.fixture
def user():
    return User.objects.create_user("op", password=PASSWORD)


def sign_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_a_hundred_wrong_passwords_lock_the_username_out_from_that_address(user, settings):
    assert settings.AXES_FAILURE_LIMIT == 10  # the documented default
    client = Client()
    answers = [sign_in(client, "op", f"wrong-{i}").status_code for i in range(100)]
    assert answers[:9] == [200] * 9  # the form again, with its error
    assert set(answers[10:]) == {429}, answers
    locked = sign_in(client, "op", PASSWORD)
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode() and "LOGIN_LOCKED_OUT" in locked.content.decode()
    assert not signed_in(client)
    # The lock is that username's from that address: the user signs in from elsewhere,
    # and another user from the attacker's address is not locked out.
    User.objects.create_user("viewer", password=PASSWORD)
    assert sign_in(Client(), "viewer", PASSWORD).status_code == 302
    elsewhere = Client()
    assert sign_in(elsewhere, "op", PASSWORD, address="10.0.0.2").status_code == 302 and signed_in(elsewhere)


def test_the_lock_ends_after_the_cool_off_and_a_success_resets_the_count(user, settings, clock):
    # A fast hasher: thirty sign-ins need not cost seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user.set_password(PASSWORD)
    user.save()
    assert settings.AXES_COOLOFF_TIME == timedelta(minutes=15)  # the documented default
    client = Client()
    for i in range(10):
        sign_in(client, "op", f"wrong-{i}")
    assert sign_in(client, "op", PASSWORD).status_code == 429
    clock.shift(timedelta(minutes=15) - timedelta(seconds=1))
    assert sign_in(client, "op", PASSWORD).status_code == 429  # not yet ...
    # ... and that try, during the lock, started the cool-off again (django-axes' default).
    clock.shift(timedelta(minutes=15) + timedelta(seconds=1))
    assert sign_in(client, "op", PASSWORD).status_code == 302 and signed_in(client)
    # After a success the count starts again: nine more failures lock nothing.
    other = Client()
    for i in range(9):
        assert sign_in(other, "op", f"wrong-{i}").status_code == 200
    assert sign_in(other, "op", PASSWORD).status_code == 302


def test_login_limits_refuse_what_is_not_a_positive_integer(monkeypatch):
    """Read as a deployment's process reads them at its start (config/settings.py imported
    afresh in this process, tests/support/settings_env.py): a limit that is not a positive
    integer stops the start, naming the variable."""
    from django.core.exceptions import ImproperlyConfigured

    from tests.support.settings_env import settings_from_env

    for name in ("STEERBOARD_LOGIN_FAILURE_LIMIT", "STEERBOARD_LOGIN_COOLOFF_SECONDS"):
        with pytest.raises(ImproperlyConfigured, match=name):
            settings_from_env(monkeypatch, **{name: "-3"}, DEBUG="1")
        monkeypatch.delenv(name)
    taken = settings_from_env(monkeypatch, STEERBOARD_LOGIN_FAILURE_LIMIT="3", STEERBOARD_LOGIN_COOLOFF_SECONDS="60", DEBUG="1")
    assert taken.AXES_FAILURE_LIMIT == 3 and taken.AXES_COOLOFF_TIME.total_seconds() == 60
