"""What runs inside ``celery worker`` and ``celery beat``: the app, tasks, stepping, beat."""
