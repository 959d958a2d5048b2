"""Telling others what turns do: event streams, outbound webhooks, signatures."""
