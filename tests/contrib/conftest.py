"""Framework integrations: each suite runs only where its framework is installed
(scripts/django_tests.sh runs the Django one, in a Python 3.12 environment)."""

from __future__ import annotations

import importlib.util

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("django") is None:
    collect_ignore_glob.append("django/*")
else:
    import django

    if django.VERSION < (6, 0):  # django.tasks is new in Django 6.0
        collect_ignore_glob.append("django/*")
