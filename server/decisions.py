"""Keep or revert: what happens to `best` when a result arrives.

Called inside the result's transaction. A decision that may move the best (keep, rebase, stale)
is made with the project row locked (PostgreSQL; SQLite has one writer anyway), so such
decisions are serial: two results that arrive together are decided one after the other, and the
second sees the `best` the first one left. Only a result measured on the current best can move
it, and only forward (the candidate's parent is the best), so `best` always fast-forwards and
never advances twice from the same base. Reverts need no lock: the best only ever gets lower, so
a result that is not better than it now is not better than it later either.

Rules, in order:
1. A result measured with another harness or on another platform is never compared: revert.
2. Only `ok` results with a val_bpb can be kept: anything else is reverted.
3. The baseline's first valid result measures the best.
4. Measured on the current best: keep if val_bpb < best - MIN_DELTA, else revert.
5. Measured on an older base (best moved while it waited or ran): if it did not beat its own
   base by MIN_DELTA, revert; otherwise re-apply its change onto the new best and queue that
   (`rebased`, same queue position), or mark it `stale` when the change no longer applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from harness.result import RunResult
from server.candidates import commit_message, find_same_train_py, queue_candidate
from server.context import AppContext, Tx
from server.crud.experiments import agent_names, measured_bpb
from server.crud.project import current_best, load_project
from server.models import KEPT, REBASED, REVERTED, STALE, Project, utcnow
from server.patches import PatchError, apply_patch, make_patch, parse_patch
from server.research_repo import blob_sha


@dataclass(frozen=True)
class Verdict:
    decision: str  # keep | revert | rebase | stale
    reason: str
    rebased_to: int | None = None  # the re-applied candidate (rebase)


def _fmt(value: float | None) -> str:
    """At least 4 decimals, up to 6 when they matter: 1.0000, 0.9812, 0.98125."""
    if value is None:
        return "unmeasured"
    whole, decimals = f"{value:.6f}".split(".")
    return f"{whole}.{decimals.rstrip('0').ljust(4, '0')}"


def judge_measured(val_bpb: float, reference: float | None, min_delta: float, name: str) -> tuple[bool, str]:
    """Whether `val_bpb` beats `reference` by more than `min_delta`, and the reason in words."""
    if reference is None:
        return True, f"{_fmt(val_bpb)} and {name} has no valid measurement"
    if val_bpb < reference - min_delta:
        return True, f"{_fmt(val_bpb)} < {name} {_fmt(reference)} - {_fmt(min_delta)}"
    return False, f"{_fmt(val_bpb)} >= {name} {_fmt(reference)} - {_fmt(min_delta)}"


def stored_bpb(result: RunResult) -> float | None:
    """The val_bpb an experiment keeps from its result: only an ok run's counts."""
    return result.val_bpb if result.status == "ok" else None


_STATUS = {"keep": KEPT, "revert": REVERTED, "rebase": REBASED, "stale": STALE}
_EVENT = {"keep": "kept", "revert": "reverted", "rebase": "rebased", "stale": "stale"}


def decide(ctx: AppContext, tx: Tx, experiment: Row[Any], result: RunResult) -> dict[str, object]:
    """Decide, apply the decision to `best` (and queue a re-applied candidate), emit events.

    Returns the experiment's new column values; the caller writes them with its own changes.
    Most results are reverted, and a revert stays right whatever other results do meanwhile
    (the best only ever gets lower), so those are decided on an unlocked read of the best; only
    a result that may move the best (or be re-applied onto it) takes the project's row lock and
    decides again on the locked, fresh row.
    """
    project: Project | Row[Any] = current_best(tx.session)
    verdict = _settled_revert(ctx, tx.session, project, experiment, result)
    if verdict is None:
        project = load_project(tx.session, lock=True)
        verdict = _verdict(ctx, tx, project, experiment, result)
    changes: dict[str, object] = {
        "best_before_commit": project.best_commit,
        "best_before_val_bpb": project.best_val_bpb,
        "decision": verdict.decision,
        "decision_reason": verdict.reason,
        "status": _STATUS[verdict.decision],
        "rebased_to_id": verdict.rebased_to,
    }
    if verdict.decision == "keep":
        assert isinstance(project, Project)
        _advance_best(ctx, tx, project, experiment, result)
    tx.emit(
        _EVENT[verdict.decision],
        experiment_id=experiment.id,
        val_bpb=stored_bpb(result),
        reason=verdict.reason,
        best=project.best_commit,
        rebased_to=verdict.rebased_to,
    )
    return changes


def _settled_revert(
    ctx: AppContext, session: Session, project: Project | Row[Any], experiment: Row[Any], result: RunResult
) -> Verdict | None:
    """The revert this result gets whatever happens concurrently, or None when it may move the best."""
    if project.harness_id is not None and result.harness_id != project.harness_id:
        return Verdict(
            "revert",
            f"measured with harness {result.harness_id!r}, the project's is {project.harness_id}: "
            "not compared",
        )
    if project.platform is not None and result.device != project.platform:
        return Verdict(
            "revert",
            f"measured on {result.device!r}, the project's platform is {project.platform!r}: not compared",
        )
    if result.status != "ok" or result.val_bpb is None:
        what = f"{result.status} ({result.error_class})" if result.error_class else result.status
        return Verdict("revert", f"run ended {what}: only ok results with a val_bpb can be kept")
    if experiment.base_commit is None:  # the baseline: decided under the lock
        return None
    min_delta = ctx.settings.min_delta
    if experiment.base_commit == project.best_commit:
        better, why = judge_measured(result.val_bpb, project.best_val_bpb, min_delta, "best")
        return None if better else Verdict("revert", why)
    base_bpb = measured_bpb(session, experiment.base_commit)
    better, why = judge_measured(result.val_bpb, base_bpb, min_delta, "its base")
    if better:
        return None
    return Verdict("revert", f"{why} ({_moved(experiment, project)})")


def _moved(experiment: Row[Any], project: Project | Row[Any]) -> str:
    old, new = (experiment.base_commit or "")[:10], (project.best_commit or "")[:10]
    return f"best moved from {old} to {new} meanwhile"


def _verdict(ctx: AppContext, tx: Tx, project: Project, experiment: Row[Any], result: RunResult) -> Verdict:
    """The decision with the project row locked (and fresh)."""
    settled = _settled_revert(ctx, tx.session, project, experiment, result)
    if settled is not None:
        return settled
    assert result.val_bpb is not None
    if experiment.base_commit is None:  # the baseline
        if experiment.commit_sha == project.best_commit and project.best_val_bpb is None:
            return Verdict("keep", f"baseline measured: val_bpb {_fmt(result.val_bpb)}")
        return Verdict("revert", "baseline re-measured after the best moved on: not compared")
    min_delta = ctx.settings.min_delta
    if experiment.base_commit == project.best_commit:
        return Verdict("keep", judge_measured(result.val_bpb, project.best_val_bpb, min_delta, "best")[1])
    base_bpb = measured_bpb(tx.session, experiment.base_commit)
    why = judge_measured(result.val_bpb, base_bpb, min_delta, "its base")[1]
    return _rebase(ctx, tx, project, experiment, f"{why}, but {_moved(experiment, project)}")


def _rebase(ctx: AppContext, tx: Tx, project: Project, experiment: Row[Any], why: str) -> Verdict:
    assert project.best_commit is not None and experiment.base_commit is not None
    base_source = ctx.repo.train_py(experiment.base_commit).decode("utf-8")
    own_source = ctx.repo.train_py(experiment.commit_sha).decode("utf-8")
    best_source = ctx.repo.train_py(project.best_commit).decode("utf-8")
    try:
        moved_source = apply_patch(best_source, parse_patch(make_patch(base_source, own_source)))
    except PatchError as exc:
        return Verdict("stale", f"{why}; its change does not apply to the new best: {exc.detail}")
    if moved_source == best_source:
        return Verdict("stale", f"{why}; the new best already contains its change")
    content = moved_source.encode()
    blob = blob_sha(content)
    twin = find_same_train_py(tx.session, blob)
    if twin is not None:
        return Verdict("rebase", f"{why}; its change on the new best is experiment {twin.id}", twin.id)
    commit = ctx.repo.commit_candidate(
        project.best_commit,
        content,
        commit_message(experiment.description, experiment.hypothesis),
        _agent_label(tx, experiment),
    )
    requeued = queue_candidate(
        ctx,
        tx,
        agent_id=experiment.agent_id,
        source="rebase",
        description=experiment.description,
        hypothesis=experiment.hypothesis,
        base_commit=project.best_commit,
        commit_sha=commit,
        blob=blob,
        queued_at=experiment.queued_at,
        rebased_from_id=experiment.id,
    )
    return Verdict(
        "rebase", f"{why}; re-applied onto the new best and queued as experiment {requeued.id}", requeued.id
    )


def _agent_label(tx: Tx, experiment: Row[Any]) -> str:
    if experiment.agent_id is None:
        return "baseline"
    return agent_names(tx.session, {experiment.agent_id}).get(experiment.agent_id, "agent")


def _advance_best(ctx: AppContext, tx: Tx, project: Project, experiment: Row[Any], result: RunResult) -> None:
    previous = project.best_commit
    project.best_commit = experiment.commit_sha
    project.best_experiment_id = experiment.id
    project.best_val_bpb = result.val_bpb
    project.updated_at = utcnow()
    if previous != experiment.commit_sha:
        ctx.repo.set_best(experiment.commit_sha)
        if previous is not None:
            tx.undo.append(lambda: ctx.repo.set_best(previous))
