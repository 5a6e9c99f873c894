"""Settings of the Django project that scripts/tool-tests runs against Aqueduct.

The database is the one in the libpq variables (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE). Every statement Django sends is logged (the
django.db.backends logger at DEBUG) to $TOOL_WORK/django-sql.log.
"""
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tool-tests-only-not-secret"
# DEBUG makes Django log every statement (the django.db.backends logger).
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.postgres",
    "shop",
]
MIDDLEWARE = []
ROOT_URLCONF = "toolproj.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db_name = os.environ.get("PGDATABASE", "aqueduct")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db_name,
        "USER": os.environ.get("PGUSER", ""),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        # Aqueduct serves one database (any name connects to it, and CREATE
        # DATABASE is not supported), so the test runner reuses this one:
        # `manage.py test --keepdb` with the test database's name equal to the
        # main one finds it in pg_database and neither creates nor drops it.
        "TEST": {"NAME": _db_name},
    }
}

_sql_log = os.path.join(os.environ.get("TOOL_WORK", "/tmp"), "django-sql.log")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {
        "sqlfile": {"class": "logging.FileHandler", "filename": _sql_log},
    },
    "loggers": {
        "django.db.backends": {"handlers": ["sqlfile"], "level": "DEBUG", "propagate": False},
        "django.db.backends.schema": {"handlers": ["sqlfile"], "level": "DEBUG", "propagate": False},
    },
}
