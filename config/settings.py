"""Steerboard settings, read from the environment (see docs/operations.md).

DATABASE_URL  unset: a SQLite file under var/ in WAL mode; postgres://... for scale-out.
REDIS_URL     unset: the in-memory channel layer (one process); redis://... for channels_redis.
"""
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def _env_limit(name: str, default: int) -> int:
    """A limit from the environment: a positive integer, or the server refuses to start."""
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    if not value.strip().isdigit() or int(value) < 1:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} must be a positive integer (like {default}), not {value!r}.")
    return int(value)


def _env_model_prices(name: str) -> dict[str, dict[str, float]]:
    """A price table from the environment: JSON, model name -> {"input", "output", "cached"}
    in US dollars per million tokens ("cached" defaults to "input"); the server refuses to
    start on anything else."""
    value = os.environ.get(name)
    if value in (None, ""):
        return {}
    import json

    from django.core.exceptions import ImproperlyConfigured

    try:
        table = json.loads(value)
        prices = {}
        for model, price in table.items():
            entry = {k: float(price[k]) for k in ("input", "output")}
            entry["cached"] = float(price.get("cached", entry["input"]))
            if not isinstance(model, str) or not model or any(v < 0 for v in entry.values()):
                raise ValueError(model)
            prices[model] = entry
        return prices
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ImproperlyConfigured(
            f'{name} is JSON like {{"gpt-4o": {{"input": 2.5, "output": 10, "cached": 1.25}}}} '
            f"(US dollars per million tokens): {exc!r}"
        )


def _env_networks(name: str) -> tuple[str, ...]:
    """Comma-separated addresses or networks; a bad one stops the start with its name."""
    import ipaddress

    from django.core.exceptions import ImproperlyConfigured

    networks = tuple(a.strip() for a in os.environ.get(name, "").split(",") if a.strip())
    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from exc
    return networks


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


DEBUG = _env_bool("DEBUG", False)
# No fixed fallback in production: with DEBUG off a server without SECRET_KEY
# refuses to start (sessions and CSRF tokens would be forgeable). `manage.py`
# on the embedded default (no DATABASE_URL), `manage.py demo`, and the test
# settings generate their own (docs/operations.md); manage.py prints this
# refusal as one line.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it (the same long random value on every process, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`), or DEBUG=1 for development "
            "(without DATABASE_URL, manage.py makes its own under var/)."
        )
    SECRET_KEY = "steerboard-development-only-secret-key-never-in-production"
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- Behind HTTPS (docs/deployment.md, "Production settings") --------------------------
# STEERBOARD_HTTPS=1: the dashboard is served over HTTPS only: secure cookies,
# HTTP redirected to HTTPS, HSTS. The proxy that terminates TLS says so in a
# header named by STEERBOARD_PROXY_SSL_HEADER (e.g. X-Forwarded-Proto: https).
HTTPS = _env_bool("STEERBOARD_HTTPS", False)
_proxy_ssl_header = os.environ.get("STEERBOARD_PROXY_SSL_HEADER", "").strip()
if _proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https")
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
# A load balancer's plain-HTTP health and readiness checks are not redirected.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)/?$"]
SECURE_HSTS_SECONDS = _env_int("STEERBOARD_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("STEERBOARD_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = _env_bool("STEERBOARD_HSTS_PRELOAD", False)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "teams",
    "mailbox",
    "frontend",
    "accounts",
    "delegation",
    "demo",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Once a sign-out's view has returned (the session is gone), its dashboard sockets close.
    "frontend.signals.SignedOutSockets",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: answers a locked-out sign-in (below, "Failed sign-ins").
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
VAR_DIR = Path(os.environ.get("STEERBOARD_VAR_DIR", BASE_DIR / "var"))
_default_db = f"sqlite:///{VAR_DIR / 'steerboard.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(os.environ.get("DATABASE_URL", _default_db), conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the
        # busy timeout instead of failing on a lock upgrade.
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        # The process's checkpoints run beside the writer (mailbox/operations/sweeper.py, every second);
        # a commit checkpoints by itself only when the WAL passes 10 000 pages (40 MB),
        # so at ordinary rates no send or entry waits for one.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=10000;",
    }
    # Tests use a file, not shared-cache memory: the busy timeout then holds
    # for concurrent threads as it does in production. One file per process.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and _env_bool("STEERBOARD_DB_POOL", False):
    # Optional, and off by default: the agents' API and the websockets do their
    # database work on a few long-lived threads that keep their connections
    # (mailbox/plumbing/db.py). A pool only saves the connect of the other requests
    # (dashboard pages, the operators' API), which close theirs after each request.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": _env_int("STEERBOARD_DB_POOL_SIZE", 16),
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channel layer ----------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")


def redis_host(url: str) -> dict:
    """The channel layer's connection to one Redis.

    A publish runs inside admission, under the target's row lock: one that hangs
    fails after 5 s, and the messages stay queued for recovery. A pooled connection
    that Redis closed (it restarted) is found closed only when it is used: the
    publish is then tried once more, at once, on a new connection (after a
    connection error only, never after a timeout)."""
    from redis import backoff, exceptions
    from redis.asyncio import retry  # the layer's connections are redis.asyncio's

    return {
        "address": url,
        "socket_timeout": 5,
        "socket_connect_timeout": 5,
        "retry_on_error": [exceptions.ConnectionError],
        "retry": retry.Retry(backoff.NoBackoff(), 1, supported_errors=(exceptions.ConnectionError,)),
    }


if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub, not channels_redis.core: every publish here is a doorbell
            # (at most once, recovered from the database), and the core layer's
            # receive costs each process four serial Redis round trips per message
            # (BZPOPMIN with a backup queue): under load the steers queued there for
            # seconds (docs/performance.md, "Doorbells through Redis").
            # channels_redis's pub/sub layer with a receive loop that survives a Redis
            # restart and resubscribes at once (mailbox/plumbing/layers.py).
            "BACKEND": "mailbox.plumbing.layers.RedisPubSubLayer",
            "CONFIG": {
                "hosts": [redis_host(REDIS_URL)],
                "prefix": os.environ.get("STEERBOARD_CHANNEL_PREFIX", "steerboard:"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 5000}}}

# --- Auth, REST, static ------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# --- Failed sign-ins (django-axes; docs/operations.md, "Quotas and rate limits") -----------
# After STEERBOARD_LOGIN_FAILURE_LIMIT failed sign-ins in a row for one username from one
# client address, that pair is locked out for STEERBOARD_LOGIN_COOLOFF_SECONDS (another
# try while locked out starts the wait again). Counted in the database: every process sees them.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = _env_limit("STEERBOARD_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = __import__("datetime").timedelta(seconds=_env_limit("STEERBOARD_LOGIN_COOLOFF_SECONDS", 900))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "accounts.authentication.OperatorTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "mailbox.transports.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Steerboard API",
    "DESCRIPTION": "Agent Teams: roster, task board and one durable Steer mailbox.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from this server's own static files (drf-spectacular-sidecar): no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # 3.1: its schemas are JSON Schema, so the pydantic models of the tools fit as they are.
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "mailbox.transports.api.openapi.add_tool_paths",
    ],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # LOG_FORMAT=json: one JSON object per line, with team, member and message id where they
    # apply (config/log_format.py; docs/operations.md, "Monitoring").
    "formatters": {"json": {"()": "config.log_format.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
if os.environ.get("LOG_FORMAT", "").lower() == "json":
    LOGGING["handlers"]["console"]["formatter"] = "json"
elif os.environ.get("LOG_FORMAT", "").lower() not in ("", "text"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"LOG_FORMAT is 'text' (the default) or 'json', not {os.environ['LOG_FORMAT']!r}.")

# --- Steerboard limits and timings (architecture.md section 6) --------------
STEERBOARD = {
    # The seed's limits (docs/operations.md); each a positive integer.
    "MAX_MESSAGE_BYTES": _env_limit("STEERBOARD_MAX_MESSAGE_BYTES", 64 * 1024),
    "MAX_PENDING_PER_TARGET": _env_limit("STEERBOARD_MAX_PENDING_PER_TARGET", 64),
    # Human prompts (dashboard, operator API, A2A) waiting for one member's turn.
    "MAX_QUEUED_PROMPTS_PER_MEMBER": _env_limit("STEERBOARD_MAX_QUEUED_PROMPTS_PER_MEMBER", 64),
    # ask_human questions one member may have waiting for a person at once (mailbox/members/asks.py).
    "MAX_PENDING_ASKS_PER_MEMBER": _env_limit("STEERBOARD_MAX_PENDING_ASKS_PER_MEMBER", 16),
    "MAX_MEMBERS_PER_TEAM": _env_limit("STEERBOARD_MAX_MEMBERS_PER_TEAM", 8),
    "MAX_TASKS_PER_TEAM": _env_limit("STEERBOARD_MAX_TASKS_PER_TEAM", 256),
    # wait_agent calls one member may have waiting at once in one server process.
    "MAX_WAITS_PER_MEMBER": _env_limit("STEERBOARD_MAX_WAITS_PER_MEMBER", 4),
    # History quota per member, in each server process (mailbox/plumbing/quota.py): bytes of one
    # entry's JSON, entries in one request (or unacknowledged on one socket), bytes a minute.
    "MAX_ENTRY_BYTES": _env_limit("STEERBOARD_MAX_ENTRY_BYTES", 256 * 1024),
    "MAX_ENTRIES_PER_REQUEST": _env_limit("STEERBOARD_MAX_ENTRIES_PER_REQUEST", 100),
    "HISTORY_BYTES_PER_MINUTE": _env_limit("STEERBOARD_HISTORY_BYTES_PER_MINUTE", 8 * 1024 * 1024),
    # Requests a second per bearer token on the REST API, /mcp and websocket tool
    # frames, with bursts up to RATE_LIMIT_BURST, in each server process.
    "RATE_LIMIT_PER_SECOND": _env_limit("STEERBOARD_RATE_LIMIT_PER_SECOND", 50),
    "RATE_LIMIT_BURST": _env_limit("STEERBOARD_RATE_LIMIT_BURST", 300),
    # The tokens (input + output) a team's models may use in all, unless an operator set the
    # team's own budget; None: no budget (mailbox/members/usage.py).
    "TEAM_TOKEN_BUDGET": _env_limit("STEERBOARD_TEAM_TOKEN_BUDGET", 0) or None,
    # What a model's tokens cost, per million (docs/operations.md, "Usage and budgets"); a
    # model not in the table shows its tokens only.
    "MODEL_PRICES": _env_model_prices("STEERBOARD_MODEL_PRICES"),
    # Websockets one member or host token may hold open at once in each server process.
    "MAX_SOCKETS_PER_TOKEN": _env_limit("STEERBOARD_MAX_SOCKETS_PER_TOKEN", 16),
    # Seconds between recovery sweeps in each server process; 0 turns the
    # in-process sweeper off (run `manage.py sweep --loop` instead).
    "SWEEP_INTERVAL": _env_float("STEERBOARD_SWEEP_INTERVAL", 5.0),
    # An accepted message undelivered for this long is re-pushed by the sweeper.
    "REDELIVER_AFTER": _env_float("STEERBOARD_REDELIVER_AFTER", 10.0),
    # The dashboard's "Needs attention" lists a message queued or accepted for this long
    # (seconds; frontend/attention.py). Defaults to REDELIVER_AFTER.
    "ATTENTION_AFTER": _env_float("STEERBOARD_ATTENTION_AFTER", _env_float("STEERBOARD_REDELIVER_AFTER", 10.0)),
    # A member whose turn is open with no new history entry for this long (seconds) is
    # "stalled" (mailbox/members/activity.py) and joins Needs attention.
    "STALL_AFTER": _env_float("STEERBOARD_STALL_AFTER", 120.0),
    # Seconds between heartbeats of each server process (mailbox/members/presence.py).
    "HEARTBEAT_INTERVAL": _env_float("STEERBOARD_HEARTBEAT_INTERVAL", 5.0),
    # A process whose heartbeat is older than this is dead: recovery closes its
    # sessions (their members become inactive and are cold-resumed) and drops its hosts.
    "PROCESS_TIMEOUT": _env_float("STEERBOARD_PROCESS_TIMEOUT", 30.0),
    # wait_agent wakes on the team's doorbells; it also looks at the database this
    # often (seconds) in case a doorbell was lost (the channel layer was down).
    "WAIT_RECHECK_INTERVAL": _env_float("STEERBOARD_WAIT_RECHECK_INTERVAL", 5.0),
    # Seconds an idempotency key replays its call's result (send_message, team_task_create); then pruned.
    "IDEMPOTENCY_WINDOW": _env_float("STEERBOARD_IDEMPOTENCY_WINDOW", 7 * 24 * 3600.0),
    # Threads (each with its own long-lived connection) that run a server process's
    # database work (mailbox/plumbing/db.py); 0: one on SQLite, eight on PostgreSQL.
    "DB_THREADS": _env_int("STEERBOARD_DB_THREADS", 0),
    # Seconds a process keeps a member token's lookup (mailbox/plumbing/auth.py): a deleted
    # token stops working within this bound.
    "TOKEN_CACHE_SECONDS": _env_float("STEERBOARD_TOKEN_CACHE_SECONDS", 5.0),
    # Count this process's SQL statements and commits for bench/engine.py (GET /api/v1/debug/sql).
    "COUNT_SQL": _env_bool("STEERBOARD_COUNT_SQL", False),
    # Prometheus metrics (mailbox/plumbing/metrics.py; GET /metrics, docs/operations.md "Monitoring"): counted
    # unless turned off; scraped with an operator token, or without one from these addresses or
    # networks (comma-separated, e.g. "127.0.0.1,10.0.0.0/8").
    "METRICS": _env_bool("STEERBOARD_METRICS", True),
    "METRICS_ALLOW": _env_networks("STEERBOARD_METRICS_ALLOW"),
}
