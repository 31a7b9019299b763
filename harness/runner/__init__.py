"""The runner: one experiment, trained and scored in sandboxes (see docs/runner.md).

Attributes load lazily: the sandboxed entry points live in this package and must not pay for
importing the runner's own dependencies.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RunRequest",
    "SandboxUnavailableError",
    "ScorerError",
    "close_warm_sandbox",
    "run_experiment",
    "warm_up",
]


def __getattr__(name: str) -> Any:
    if name == "run_experiment":
        from harness.runner.run import run_experiment

        return run_experiment
    if name == "RunRequest":
        from harness.runner.run import RunRequest

        return RunRequest
    if name == "warm_up":
        from harness.runner.run import warm_up

        return warm_up
    if name == "close_warm_sandbox":
        from harness.runner.run_setup import close_warm_sandbox

        return close_warm_sandbox
    if name == "SandboxUnavailableError":
        from harness.runner.sandbox import SandboxUnavailableError

        return SandboxUnavailableError
    if name == "ScorerError":
        from harness.runner.score_phase import ScorerError

        return ScorerError
    raise AttributeError(name)
