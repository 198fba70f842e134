"""Accelplane settings, read from the environment.

Unset means embedded mode: SQLite, an in-process channel layer, a Celery broker on a SQLite
file (no Redis) and the `sim` provider. DATABASE_URL and REDIS_URL switch to the full stack.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from controlplane import keys

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("ACCELPLANE_VAR_DIR", BASE_DIR / "var"))


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value in ("1", "true", "True"):
        return True
    if value in ("0", "false", "False"):
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1, 0, true, false (got {value!r})")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer (got {value!r})") from None


MAX_SOCKET_PORTS = 16


def envports(name: str) -> tuple[int, ...]:
    """A comma-separated list of TCP ports (at most MAX_SOCKET_PORTS); () when unset."""
    value = os.environ.get(name, "")
    ports = tuple(part.strip() for part in value.split(",")) if value.strip() else ()
    if len(ports) > MAX_SOCKET_PORTS or not all(
        port.isdigit() and 0 < int(port) < 65536 for port in ports
    ):
        raise ImproperlyConfigured(
            f"{name} must be up to {MAX_SOCKET_PORTS} TCP ports (1-65535), separated by commas "
            f"(got {value!r})"
        )
    return tuple(int(port) for port in ports)


# On only where `make run` sets it: its error pages show settings and source to any tenant.
DEBUG = envbool("DEBUG", False)
# Keys of one machine (the embedded mode's SQLite, or DEBUG) are generated once into var/ and
# shared by its processes; the full stack's processes run on several machines: set them.
_ONE_MACHINE = DEBUG or not os.environ.get("DATABASE_URL")
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY and _ONE_MACHINE:
    SECRET_KEY = keys.local_key(VAR_DIR / "secret-key", keys.new_secret_key)
if not DEBUG and (_problem := keys.secret_key_problem(SECRET_KEY)):
    raise ImproperlyConfigured(
        f"SECRET_KEY {_problem}; set one, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
if not DEBUG:
    # Production sits behind TLS (a load balancer that sets X-Forwarded-Proto).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]  # scraped in-cluster over plain HTTP
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    # Joining browsers' HSTS preload list cannot be undone quickly: the operator opts in.
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
    SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
    # false only to serve plain HTTP on one machine (`make stack`): browsers keep secure
    # cookies from http://127.0.0.1.
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", True)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "events",
    "clusters",
    "workloads",
    "teams",
    "api",
    "web",
]

MIDDLEWARE = [
    "controlplane.middleware.request_id",
    "api.metrics.observe_requests",
    "controlplane.middleware.bound_request_bodies",
    "controlplane.middleware.reject_nul_bytes",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
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
                "web.context.sockets",
            ]
        },
    }
]
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"
# The ports, on the page's own host, of the ASGI servers that hold the pages' WebSockets when
# HTTP is served apart from them (make stack and Compose: controlplane/run.py); each page is
# given one at random. Unset: the page's own host and port, where one server serves both
# (make run) or a proxy sends /ws/ to the sockets' servers.
ACCELPLANE_SOCKET_PORTS = envports("ACCELPLANE_SOCKET_PORTS")

DATABASE_URL = os.environ.get("DATABASE_URL", "")
# make stack's HTTP servers run as many requests at once (controlplane.run.http_threads).
DATABASE_POOL_SIZE = envint("DATABASE_POOL_SIZE", 8)
PREPARE_THRESHOLD = 5  # psycopg's own default
if DATABASE_URL:
    DATABASES: dict[str, dict[str, Any]] = {"default": dict(dj_database_url.parse(DATABASE_URL))}
    if DATABASE_POOL_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # Under ASGI every request runs in a thread of its own, so per-thread persistent
        # connections pile up until PostgreSQL refuses clients: a pool per process instead,
        # whose connections are checked when taken (a database restart leaves dead ones).
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
        DATABASES["default"]["OPTIONS"] = {
            # Waiting longer for a connection than this answers 503: the database is down,
            # or so busy that queueing more requests would only make it worse.
            "pool": {"min_size": 1, "max_size": DATABASE_POOL_SIZE, "timeout": 3}
        }
    else:
        # Health checks: a connection that died with a database restart is replaced.
        DATABASES["default"].update(CONN_MAX_AGE=60, CONN_HEALTH_CHECKS=True)
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and envbool(
        "DATABASE_PREPARED_STATEMENTS", True
    ):
        # Parameters bound by the server, and a statement run PREPARE_THRESHOLD times on a
        # connection prepared there: parsed and planned once per connection, not per request.
        # Django turns both off for poolers in transaction mode (PgBouncer before 1.21),
        # which must set DATABASE_PREPARED_STATEMENTS=false.
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            server_side_binding=True, prepare_threshold=PREPARE_THRESHOLD
        )
    _host = DATABASES["default"].get("HOST") or ""
    if DEBUG and not (_host in ("", "localhost", "127.0.0.1", "::1") or _host.startswith("/")):
        raise ImproperlyConfigured(
            f"DEBUG is for one machine, but DATABASE_URL names host {_host!r}: a deployment "
            "runs with DEBUG off"
        )
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "accelplane.sqlite3"),
            # Writers queue behind the database lock instead of failing at once. WAL: readers
            # (the web process) never wait on the writer (the worker), and a commit appends to
            # the log instead of syncing the database file (synchronous=NORMAL is safe in WAL:
            # a crash may lose the last commits, never corrupt the file). The log is copied
            # into the file (and both synced) every 10,000 pages, not SQLite's 1,000: at 1,000,
            # checkpoints took two thirds of the commits' time in Kueue's baseline suite. The
            # log file then stays at most about 40 MB. Temporary files (statement journals,
            # sorts) stay in memory: on disk, the suite's large statements opened, wrote and
            # deleted 1,832 of them at 0.3 of its size.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                    "PRAGMA wal_autocheckpoint=10000; PRAGMA temp_store=MEMORY;"
                ),
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")


def channel_layer(redis_url: str) -> dict[str, Any]:
    """The channel layer on the Redis that `redis_url` names."""
    # Redis's publish/subscribe ignores database numbers: two deployments on one Redis server
    # in different databases would receive each other's events. Their channels' names carry
    # the database number.
    database = urlsplit(redis_url).path.strip("/") or "0"
    return {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "prefix": f"asgi-db{database}",
            # Hundreds of sockets joining at once each borrow a connection (redis-py stops at
            # 100 by default); reads wait longer than the layer's 5 s blocking pops.
            "hosts": [{"address": redis_url, "max_connections": 2000, "socket_timeout": 30}],
        },
    }


if REDIS_URL:
    # Shared by every web process: rate limits hold across them. Django's Redis backend, with
    # its redis-py clients reused (controlplane/cache.py says why).
    CACHES = {"default": {"BACKEND": "controlplane.cache.RedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {"default": channel_layer(REDIS_URL)}
    CELERY_BROKER_URL = REDIS_URL
    # A task a killed worker held is handed to another worker after this many seconds. Our
    # tasks are short and idempotent and retry with countdowns of a second or two, so a short
    # timeout costs nothing and lets provisioning resume quickly.
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "visibility_timeout": 5,
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
        # One worker at a time hands tasks over, under a lock it holds for milliseconds; a
        # worker killed while holding it would stop every hand-over for kombu's default 300 s.
        "unacked_mutex_expire": 10,
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Separate worker and beat processes without Redis: a broker on a SQLite file
    # (controlplane/broker.py says why not kombu's filesystem transport).
    CELERY_BROKER_URL = f"sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
    CELERY_BROKER_TRANSPORT = "controlplane.broker:Transport"
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

ACCELPLANE_PROVIDER = os.environ.get("ACCELPLANE_PROVIDER", "sim")
# Simulated GKE operations take this long (seconds of wall time) before nodes appear.
ACCELPLANE_SIM_OPERATION_SECONDS = envint("ACCELPLANE_SIM_OPERATION_SECONDS", 3)
# How long one watch session of a real cluster's apiserver lasts before the next one.
ACCELPLANE_WATCH_SESSION_SECONDS = envint("ACCELPLANE_WATCH_SESSION_SECONDS", 300)
# The gke provider: Application Default Credentials unless a service account key file is
# named; an endpoint override (plain http) points the client at a local fake (docs/gke.md).
ACCELPLANE_GKE_ENDPOINT = os.environ.get("ACCELPLANE_GKE_ENDPOINT", "")
ACCELPLANE_GKE_CREDENTIALS_FILE = os.environ.get("ACCELPLANE_GKE_CREDENTIALS_FILE", "")
# Kubernetes API servers on plain http or loopback (local fakes: the contract tests). Off, a
# kubeconfig's server must be https and never loopback, link-local or metadata (SSRF).
ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = envbool("ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS", False)
if ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS and not DEBUG:
    raise ImproperlyConfigured(
        "ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS is for local fakes: a deployment (DEBUG off) "
        "reaches API servers over https only"
    )
# Encrypts uploaded service account keys (a Fernet key: `python -c "from cryptography.fernet
# import Fernet; print(Fernet.generate_key().decode())"`). Unset: generated into var/ on one
# machine, else derived from SECRET_KEY (clusters/credentials.py).
ACCELPLANE_ENCRYPTION_KEY = os.environ.get("ACCELPLANE_ENCRYPTION_KEY", "")
if not ACCELPLANE_ENCRYPTION_KEY and _ONE_MACHINE:
    ACCELPLANE_ENCRYPTION_KEY = keys.local_key(VAR_DIR / "encryption-key", keys.new_encryption_key)
if ACCELPLANE_ENCRYPTION_KEY:
    try:
        Fernet(ACCELPLANE_ENCRYPTION_KEY)
    except ValueError:
        raise ImproperlyConfigured(
            "ACCELPLANE_ENCRYPTION_KEY is not a Fernet key (32 url-safe base64-encoded bytes)"
        ) from None

# Limits: what one request may ask, so that no tenant holds a core or grows memory for
# everyone (docs/api.md, "Limits", has the table). Past one: a 400 (413 for a body) naming
# the field or the limit, and nothing stored.
# Kubernetes' own limits (names, labels, annotations, indexed Jobs, int64 quantities) are not
# settings: they live in workloads/manifests/limits.py and workloads/quantities.py.
# A manifest body (API, upload, paste); beyond it 413. Django's form limit follows it.
ACCELPLANE_MAX_MANIFEST_BYTES = envint("ACCELPLANE_MAX_MANIFEST_BYTES", 1_048_576)
# Any other request body (JSON, forms): its own fields plus a pasted manifest.
DATA_UPLOAD_MAX_MEMORY_SIZE = ACCELPLANE_MAX_MANIFEST_BYTES + 65_536
# The documents of one request with YAML aliases (and `<<` merges) expanded, as JSON text:
# a 500-byte alias bomb would otherwise expand to gigabytes.
ACCELPLANE_MAX_EXPANDED_MANIFEST_BYTES = envint(
    "ACCELPLANE_MAX_EXPANDED_MANIFEST_BYTES", 2 * ACCELPLANE_MAX_MANIFEST_BYTES
)
ACCELPLANE_MAX_MANIFEST_ALIASES = envint("ACCELPLANE_MAX_MANIFEST_ALIASES", 100)  # per document
ACCELPLANE_MAX_DOCUMENTS = envint("ACCELPLANE_MAX_DOCUMENTS", 100)  # per request
# Of YAML and JSON bodies; checks recurse, so it stays well below Python's limit of 1000.
ACCELPLANE_MAX_NESTING_DEPTH = envint("ACCELPLANE_MAX_NESTING_DEPTH", 64)
if not 1 <= ACCELPLANE_MAX_NESTING_DEPTH <= 200:
    raise ImproperlyConfigured("ACCELPLANE_MAX_NESTING_DEPTH must be between 1 and 200")
# The simulator builds every pod and Kueue workload in the request: about 0.2 ms per Job pod,
# 1 ms per Deployment replica on SQLite, so these bound a request's work to seconds.
ACCELPLANE_MAX_REPLICAS = envint("ACCELPLANE_MAX_REPLICAS", 10_000)  # Deployment, LWS, JobSet
ACCELPLANE_MAX_PODS_PER_OBJECT = envint("ACCELPLANE_MAX_PODS_PER_OBJECT", 10_000)
ACCELPLANE_MAX_PODS_PER_REQUEST = envint("ACCELPLANE_MAX_PODS_PER_REQUEST", 20_000)
# Real clusters watched at once (workloads/kube/watch.py): each has a watch session per watched
# resource, each a thread of the watcher (the `watch` queue's worker) and a database connection
# while it runs, so the watcher's pool is this many times the watched resources; clusters past
# it (by age) are not watched, with a warning in the log.
ACCELPLANE_MAX_WATCHED_CLUSTERS = envint("ACCELPLANE_MAX_WATCHED_CLUSTERS", 8)
if ACCELPLANE_MAX_WATCHED_CLUSTERS < 1:
    raise ImproperlyConfigured("ACCELPLANE_MAX_WATCHED_CLUSTERS must be at least 1")
# Live events (workloads/live.py): a round of the simulator, or a tick over a real cluster's
# pods, names at most this many workload owners in `workload.pods` events; the others are
# summed per namespace. So a 10,000-pod round makes at most this many events plus one per
# namespace, not one per pod.
ACCELPLANE_LIVE_OWNER_EVENTS = envint("ACCELPLANE_LIVE_OWNER_EVENTS", 200)
# At most one `workload.progress` per training workload per this many seconds of its
# cluster's clock (virtual in the simulator), besides one per round that saved a checkpoint.
ACCELPLANE_PROGRESS_EVENT_SECONDS = envint("ACCELPLANE_PROGRESS_EVENT_SECONDS", 30)
if ACCELPLANE_LIVE_OWNER_EVENTS < 1 or ACCELPLANE_PROGRESS_EVENT_SECONDS < 1:
    raise ImproperlyConfigured(
        "ACCELPLANE_LIVE_OWNER_EVENTS and ACCELPLANE_PROGRESS_EVENT_SECONDS must be at least 1"
    )

# Where admission runs after an API change: "request" (in the request, which then answers with
# the outcome) or "worker" (a Celery task soon after, one per burst of changes per cluster,
# as Kueue admits asynchronously: requests stay short and concurrent ones do not queue up on
# the admission lock). The full stack runs "worker".
ACCELPLANE_ADMISSION = os.environ.get("ACCELPLANE_ADMISSION", "request")
if ACCELPLANE_ADMISSION not in ("request", "worker"):
    raise ImproperlyConfigured(
        f"ACCELPLANE_ADMISSION={ACCELPLANE_ADMISSION!r}: expected 'request' or 'worker'"
    )
# Admission keeps each cluster's queued workloads in memory between runs
# (workloads/admission_cache.py): "on". "off": every run reads them from the database.
# "verify" (the tests): from memory, and from the database to fail on any difference.
_ADMISSION_CACHE = os.environ.get("ACCELPLANE_ADMISSION_CACHE", "on")
if _ADMISSION_CACHE not in ("on", "off", "verify"):
    raise ImproperlyConfigured(
        f"ACCELPLANE_ADMISSION_CACHE={_ADMISSION_CACHE!r}: expected 'on', 'off' or 'verify'"
    )
ADMISSION_CACHE = _ADMISSION_CACHE != "off"
ADMISSION_CACHE_VERIFY = _ADMISSION_CACHE == "verify"
# Per API token (or signed-in user); beyond it requests answer 429 with Retry-After.
ACCELPLANE_API_RATE = os.environ.get("ACCELPLANE_API_RATE", "6000/min")
# How often a WebSocket re-reads the event log: the in-process channel layer cannot carry
# events from the Celery worker, Redis can (there the poll only covers a Redis restart).
ACCELPLANE_EVENTS_POLL_SECONDS = float(
    os.environ.get("ACCELPLANE_EVENTS_POLL_SECONDS", "5" if REDIS_URL else "1")
)
# How often a WebSocket re-reads its user's session, API token and teams (closing it once
# signed out, narrowing it once a team is left); logout and membership changes also ask at once.
ACCELPLANE_EVENTS_RECHECK_SECONDS = envint("ACCELPLANE_EVENTS_RECHECK_SECONDS", 5)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns while it is missing
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "teams.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "api.common.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # DRF's, with JSON nested at most ACCELPLANE_MAX_NESTING_DEPTH levels.
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TokenRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.handle",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Accelplane API",
    "DESCRIPTION": "Submit Kubernetes workloads to Kueue-style queues on GKE GPUs and TPUs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Cluster and NodePool both have a `status`; each its own enum name.
    "ENUM_NAME_OVERRIDES": {"ClusterStatusEnum": "clusters.models.Cluster.Status"},
}

# LOG_FORMAT=json: one JSON object per line (for log collectors); plain text otherwise.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.middleware.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": os.environ.get("LOG_FORMAT", "plain"),
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# Watch sessions wait on an apiserver for minutes: their own queue, and a thread-pool worker
# (controlplane/run.py, docker-compose.yml) so they never hold the admitting workers.
CELERY_TASK_ROUTES = {"workloads.tasks.watch_resource": {"queue": "watch"}}
CELERY_BEAT_SCHEDULE = {
    "tick-clusters": {"task": "workloads.tasks.tick_clusters", "schedule": 2.0},
    "resume-provisioning": {"task": "clusters.tasks.resume_provisioning", "schedule": 15.0},
    "watch-clusters": {"task": "workloads.tasks.watch_clusters", "schedule": 10.0},
    "number-events": {"task": "events.tasks.number_events", "schedule": 10.0},
}
