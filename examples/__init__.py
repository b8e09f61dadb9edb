"""Runnable examples; importable so tests can reuse their envs."""
