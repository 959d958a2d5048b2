"""Helpers, agents and local servers the suites share (never imported from a test module)."""
