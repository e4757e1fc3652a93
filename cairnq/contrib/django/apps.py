"""The Django application: listing it in INSTALLED_APPS adds ``cairnq_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class CairnQConfig(AppConfig):
    name = "cairnq.contrib.django"
    label = "cairnq"
    verbose_name = "cairnq"
