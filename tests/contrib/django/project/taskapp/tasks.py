"""Tasks the worker finds at start (an installed app's tasks module)."""

import os
import time
from pathlib import Path

from django.tasks import task


class Boom(Exception):
    pass


@task
def add(a, b):
    return a + b


@task
def explode(message):
    raise Boom(message)


@task(takes_context=True)
def introspect(context, tag):
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task
async def async_double(n):
    return n * 2


@task(queue_name="emails", priority=5)
def send_mail(to):
    return f"sent to {to}"


@task
def rendezvous(directory, me, wait_for):
    """Runs until ``wait_for`` tasks have arrived in ``directory``: only as many
    workers as there are arrivals can make it finish."""
    Path(directory, me).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(directory)) < wait_for:
        if time.monotonic() > deadline:
            raise TimeoutError("the other tasks never came")
        time.sleep(0.02)
    return os.getpid()


@task
def flaky(marker):
    """Fails the first time, succeeds the next."""
    if not os.path.exists(marker):
        Path(marker).touch()
        raise Boom("first attempt")
    return "second attempt"
