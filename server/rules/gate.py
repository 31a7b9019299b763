"""The gate: nothing is compared with a best that is not measured yet.

A rule on plain data (what crud.leases.best_measurement reads), applied by each claim
(server/flows/leases.py) until it opens:
- The best is measured under the greedy rule once it has a valid run; under the noise-aware rule
  once the noise estimate on the project's pins rests on NOISE_RUNS runs (on one worker, df >=
  NOISE_RUNS - 1; on a fleet the workers' offsets take some of those degrees of freedom).
  Then the gate opens for good: a measurement is never lost.
- Until then only the best's runs go out while it has any queued or running.
- An unmeasured best with none left: one with valid runs is compared on those, and one that
  ended by its own fault cannot be measured (the next valid result will do), so any run may go
  out; one whose runs lost their workers (cancelled or infra_failed, no valid run) keeps the gate
  shut, and nothing goes out until it is queued again (at the next server start, `init`, or an
  admin's retry).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.states import RETRYABLE_STATUSES, ExperimentStatus, Rule


@dataclass(frozen=True)
class BestMeasurement:
    """What the gate reads of the best."""

    experiment_id: int
    status: ExperimentStatus
    valid_runs: int
    noise_runs: int | None  # the noise estimate's on the project's pins; None before there is one
    live_runs: int  # queued or running


@dataclass(frozen=True)
class Gate:
    only: int | None  # the one experiment whose runs may go out now; None: any
    measured: bool  # the best is measured: the gate stays open from now on


def gate_for(best: BestMeasurement | None, rule: Rule, noise_runs: int) -> Gate:
    """The gate for a claim now; `best` None when there is no best (nothing to wait for)."""
    if best is None:
        return Gate(only=None, measured=False)
    if rule == Rule.NOISE_AWARE:
        measured = best.noise_runs is not None and best.noise_runs >= noise_runs
    else:
        measured = best.valid_runs > 0
    if measured:
        return Gate(only=None, measured=True)
    if best.live_runs == 0 and (best.valid_runs > 0 or best.status not in RETRYABLE_STATUSES):
        return Gate(only=None, measured=False)
    return Gate(only=best.experiment_id, measured=False)
