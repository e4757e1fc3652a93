"""A task in a module nothing imports at start: the worker meets its name in
the queue and registers it then."""

from django.tasks import task


@task
def shout(word):
    return word.upper()
