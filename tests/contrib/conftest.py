"""Framework integrations: each suite runs only where its framework is installed
(scripts/django_tests.sh runs the Django one, in a Python 3.12 environment)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

collect_ignore: list[str] = []


def _major(distribution: str) -> int:
    # From the installed distribution's metadata, not an import: this directory
    # is on sys.path while tests run, and its django/ would pass for a package.
    try:
        return int(version(distribution).split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


if _major("django") < 6:  # django.tasks is new in Django 6.0
    collect_ignore.append("django")
