"""Examples, demos and local launchers; not part of the installed package.

``orders`` holds the order-support agents (``AGENTWORKER_AGENT_LOADER=examples.orders:
order_loader``), ``demo`` is ``make demo``, ``fleet`` is ``make demo-fleet``, and ``local``
starts a private redis-server and Celery processes for demos, tests and benchmarks.
"""
