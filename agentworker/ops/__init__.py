"""Operating the fleet: metrics, traces, structured logs, health checks, Celery signals."""
