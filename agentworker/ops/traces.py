"""The OpenTelemetry SDK for workers and beat, configured by the standard OTEL_* variables.

Our spans go through the API only (``runner_core._engine.tracing``); this module installs the SDK
(the ``otel`` extra) when the environment asks for traces: ``OTEL_TRACES_EXPORTER`` (``otlp``
or ``console``) or an ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT``; ``OTEL_SDK_DISABLED=true``
turns it off. The OTLP exporter (HTTP/protobuf) reads its own OTEL_EXPORTER_OTLP_*
variables, the batch processor OTEL_BSP_*, the resource OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES. Celery's instrumentation is added when installed, so a step's
span links to the task span of its wake-up.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("agentworker.otel")


def wanted() -> bool:
    """Whether the environment asks for traces."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def installed() -> Any:
    """The SDK's tracer provider once one is installed in this process, else None.

    OpenTelemetry keeps one global provider per process and refuses to replace it, so the
    library's own global says whether the SDK is on: no flag of ours could know more.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, TracerProvider) else None


def setup_tracing(service_name: str = "agentworker-worker") -> bool:
    """Install the SDK tracer provider once per process, if wanted; True if installed."""
    if installed() is not None:
        return True
    if not wanted():
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_* asks for traces but opentelemetry-sdk is missing: pip install "
            "'agentworker[otel]'"
        )
        return False
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    _instrument_celery()
    log.info("OpenTelemetry traces on (%s)", os.environ.get("OTEL_TRACES_EXPORTER", "otlp"))
    return True


def instrument_http_app(app: Any) -> None:
    """The HTTP app: the SDK when OTEL_* asks, and a server span around every request.

    With the ASGI instrumentation installed (the ``otel`` extra), a request's span (a child
    of the caller's ``traceparent`` header) is current while the app starts or resumes a
    turn, so the turn's trace continues the caller's.
    """
    setup_tracing("agentworker-http")
    try:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    except ImportError:
        return
    app.add_middleware(OpenTelemetryMiddleware)


def _exporter() -> Any:
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower().split(",")[0]
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _instrument_celery() -> None:
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ImportError:
        return
    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still buffered (a prefork child about to exit)."""
    provider = installed()
    if provider is not None:
        provider.force_flush(timeout_ms)


def shutdown() -> None:
    """Flush and stop the exporter (the worker is stopping)."""
    provider = installed()
    if provider is not None:
        provider.shutdown()
