"""Benchmarks. Each ``bench/<name>.py`` module exposes ``run() -> dict[str, float]`` and can be run
alone (``python -m bench.<name> [--json]``); ``python -m bench [--json]`` runs them all."""
