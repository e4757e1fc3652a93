from django.urls import path
from taskapp import views

urlpatterns = [path("add/<int:a>/<int:b>/", views.enqueue_add)]
