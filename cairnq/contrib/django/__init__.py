"""A ``django.tasks`` backend on cairnq (Django 6+, the ``django`` extra).

    INSTALLED_APPS += ["cairnq.contrib.django"]          # the cairnq_worker command
    TASKS = {"default": {"BACKEND": "cairnq.contrib.django.CairnQBackend",
                         "OPTIONS": {"db": "tasks.sqlite3"}}}

``python manage.py cairnq_worker`` runs the tasks. See docs/django.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairnq.contrib.django.backend import CairnQBackend

__all__ = ["CairnQBackend"]


def __getattr__(name: str) -> Any:
    # Lazy: Django imports this package while it loads INSTALLED_APPS, before
    # the task framework (and the settings it reads) should be touched.
    if name == "CairnQBackend":
        from cairnq.contrib.django.backend import CairnQBackend

        return CairnQBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
