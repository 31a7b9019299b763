"""The words of the protocol, each defined once: experiment statuses, decisions and run states,
the decision rule, the kinds of change (keep rates) and of similarity.

The server's models and schemas (protocol/schemas.py) and the SDK import these; a status or
decision word is written nowhere else. They are `StrEnum`s, so each member is also the plain
string the API sends.
"""

from __future__ import annotations

from enum import StrEnum


class ExperimentStatus(StrEnum):
    """Where an experiment (one candidate train.py) is. queued -> running -> one of the final ones;
    back to queued while its runs go on (a confirmation run, a lost lease)."""

    QUEUED = "queued"  # its next run waits for a worker
    RUNNING = "running"  # one of its runs is leased to a worker
    KEPT = "kept"  # it became the best
    REVERTED = "reverted"  # measured (or crashed) and not kept
    REBASED = "rebased"  # better than its base, but the best moved: re-applied onto the new best
    STALE = "stale"  # as rebased, but its change no longer applies to the new best, or not within the limits
    CANCELLED = "cancelled"
    INFRA_FAILED = "infra_failed"  # a run lost its worker MAX_ATTEMPTS times


class Decision(StrEnum):
    """What the server decided about an experiment (its final status follows from it)."""

    KEEP = "keep"
    REVERT = "revert"
    REBASE = "rebase"
    STALE = "stale"


class RunState(StrEnum):
    """Where one run of an experiment is."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"  # a result was recorded
    # A result was recorded, but it read so much worse than its reference that its machine was
    # presumed slowed: not counted, and another run of the experiment queued (server/rules/judge.py, rerun).
    SLOWED = "slowed"
    CANCELLED = "cancelled"  # dropped before it ran or while it ran
    INFRA_FAILED = "infra_failed"


class LeaseState(StrEnum):
    """Where a worker's hold on one run is (server/crud/leases.py)."""

    ACTIVE = "active"  # held: the worker heartbeats it
    EXPIRED = "expired"  # not heartbeated in time: the run went back to the queue
    RELEASED = "released"  # given back by its worker (stopping, or its own fault)
    FINISHED = "finished"  # its result was recorded


class TokenKind(StrEnum):
    """Who holds an API token, and so what it may do (docs/api.md, "Authentication")."""

    AGENT = "agent"  # submits changes, posts notes, cancels its own experiments
    WORKER = "worker"  # claims runs and reports their results
    ADMIN = "admin"  # an agent that may also cancel and retry anyone's, import results, make tokens


AGENT_KINDS = frozenset({TokenKind.AGENT, TokenKind.ADMIN})  # tokens that may act as an agent


class RunKind(StrEnum):
    """Why a run was made."""

    FIRST = "first"  # an experiment's first run: for a candidate, the screening run
    CONFIRMATION = "confirmation"  # another run of a promising candidate
    REPEAT = "repeat"  # another run of the best: its noise and its value get more precise


class Rule(StrEnum):  # how the server decides keep or revert (server/rules/judge.py)
    NOISE_AWARE = "noise_aware"
    GREEDY = "greedy"


class Part(StrEnum):
    """The part of train.py a kind of change is about."""

    CONSTANT = "constant"
    REGION = "region"


class Direction(StrEnum):
    """How a constant's value moved."""

    UP = "up"
    DOWN = "down"
    ADDED = "added"  # the constant is new
    REMOVED = "removed"  # the constant went


class SimilarityKind(StrEnum):
    """How an earlier change resembles a new one, from the most alike to the least."""

    IDENTICAL = "identical"  # the same train.py (content hash); found by the caller, not by this rule
    SAME_CHANGE = "same_change"
    SAME_CHANGE_OTHER_BASE = "same_change_other_base"
    NEARBY_CONSTANTS = "nearby_constants"
    SAME_DIRECTION = "same_direction"  # the same constants moved the same way, further or not as far
    CONTAINED = "contained"  # its whole change is part of this one (this one combines it with more)
    OVERLAPPING_CODE = "overlapping_code"


FINAL_STATUSES = frozenset(
    {
        ExperimentStatus.KEPT,
        ExperimentStatus.REVERTED,
        ExperimentStatus.REBASED,
        ExperimentStatus.STALE,
        ExperimentStatus.CANCELLED,
        ExperimentStatus.INFRA_FAILED,
    }
)
# Ended without a verdict on the change itself (its runs lost their workers, or it was cancelled):
# an admin may queue it again (POST /experiments/{id}/retry), and an unmeasured best is queued
# again when the server starts.
RETRYABLE_STATUSES = frozenset({ExperimentStatus.INFRA_FAILED, ExperimentStatus.CANCELLED})
DECIDED_STATUS = {
    Decision.KEEP: ExperimentStatus.KEPT,
    Decision.REVERT: ExperimentStatus.REVERTED,
    Decision.REBASE: ExperimentStatus.REBASED,
    Decision.STALE: ExperimentStatus.STALE,
}
