"""Periodic tasks: cron or interval schedules that enqueue ordinary tasks,
exactly once per fire instant across any number of workers, with no leader.

``schedule.py`` is the arithmetic (when a schedule fires), ``declaration.py``
what one declared schedule enqueues, ``scheduler.py`` the loop that submits.
"""

from cairnq.periodic.declaration import CATCH_UP, Periodic, declare, fire_key
from cairnq.periodic.schedule import Schedule, instant_text, parse_instant, parse_schedule
from cairnq.periodic.scheduler import Scheduler

__all__ = [
    "CATCH_UP",
    "Periodic",
    "Schedule",
    "Scheduler",
    "declare",
    "fire_key",
    "instant_text",
    "parse_instant",
    "parse_schedule",
]
