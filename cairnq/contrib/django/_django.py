"""Every Django name this package uses enters here.

Django ships no type information, and the package's type check also runs
where Django 6 cannot be installed (Python 3.11): each import below is
untyped (``import-untyped``) or absent (``import-not-found``), and mypy sees
Any either way. This module alone waives those two errors, so the others
stay plain.
"""

# mypy: disable-error-code="import-not-found,import-untyped"
from __future__ import annotations

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
)
from django.db import close_old_connections
from django.tasks import (
    Task as DjangoTask,
)
from django.tasks import (
    TaskContext as DjangoContext,
)
from django.tasks import (
    TaskResult,
    TaskResultStatus,
    task_backends,
)
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
)
from django.tasks.signals import (
    task_enqueued,
    task_finished,
    task_started,
)
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import (
    autodiscover_modules,
    import_string,
)

__all__ = [
    "AppConfig",
    "BaseCommand",
    "BaseTaskBackend",
    "CommandError",
    "CommandParser",
    "DjangoContext",
    "DjangoTask",
    "InvalidTask",
    "InvalidTaskBackend",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "apps",
    "autodiscover_modules",
    "checks",
    "close_old_connections",
    "import_string",
    "normalize_json",
    "settings",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "timezone",
]
