"""The Django application: listing it in INSTALLED_APPS adds ``cairnq_worker``."""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

from cairnq.contrib.django._django import AppConfig


class CairnQConfig(AppConfig):
    name = "cairnq.contrib.django"
    label = "cairnq"
    verbose_name = "cairnq"
