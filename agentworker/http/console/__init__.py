"""The turn console: server-rendered pages (``pages``), their markup (``views``), ``static/``."""
