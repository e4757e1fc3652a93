from django.http import JsonResponse

from taskapp.tasks import add


def enqueue_add(request, a, b):
    result = add.enqueue(a, b)
    return JsonResponse({"id": result.id})
