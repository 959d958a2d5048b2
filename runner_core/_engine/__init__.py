"""The step machine and what only it uses; nothing outside ``runner_core`` imports these."""
