"""The test project's settings. Where tasks are stored comes from the
environment (the tests set it for the worker processes they start, and apply
``configure(...)`` of the same values in their own process):

* TASKSITE_QUEUE_DB: OPTIONS["db"] (a SQLite path or a DSN), or
* TASKSITE_PG_DSN: Django's own default database on PostgreSQL, with no "db"
  option (cairnq then uses that database, in its schema "cairnq");
* TASKSITE_MAX_ATTEMPTS: OPTIONS["max_attempts"].
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.contenttypes", "cairnq.contrib.django", "taskapp"]
ROOT_URLCONF = "tasksite.urls"
USE_TZ = True
TIME_ZONE = "Europe/Paris"  # not UTC, so a time zone mistake shows


def configure(env):
    """DATABASES and TASKS for these environment values."""
    pg = env.get("TASKSITE_PG_DSN")
    if pg:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(pg)
        databases = {
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts.get("dbname", ""),
                "USER": parts.get("user", ""),
                "PASSWORD": parts.get("password", ""),
                "HOST": parts.get("host", ""),
                "PORT": parts.get("port", ""),
            }
        }
    else:
        databases = {
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "django.sqlite3"}
        }
    options = {"db": env["TASKSITE_QUEUE_DB"]} if env.get("TASKSITE_QUEUE_DB") else {}
    if env.get("TASKSITE_MAX_ATTEMPTS"):
        options["max_attempts"] = int(env["TASKSITE_MAX_ATTEMPTS"])
    tasks = {
        "default": {
            "BACKEND": "cairnq.contrib.django.CairnQBackend",
            "QUEUES": ["default", "emails", "elsewhere"],
            "OPTIONS": options,
        }
    }
    return {"DATABASES": databases, "TASKS": tasks}


globals().update(configure(os.environ))
