"""The ``agentworker`` command line: ``main`` (the entry point), commands, remote, views."""
