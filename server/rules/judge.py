"""Keep or revert, as a pure function of the measurements: `judge(snapshot) -> Verdict`.

No database, no git, no I/O: the snapshot holds everything the rule looks at, and the verdict is
everything it says. `server/crud/evidence.py` reads the snapshot, `server/flows/decisions.py` applies
the verdict, and `server/flows/results.py` calls the three in that order, once per result.

Before any comparison, what the run is a run of:

- a decided experiment (the best's repeats, the baseline's measuring runs): the run only counts,
  unless it ended in an integrity class (protocol.result.INTEGRITY_CLASSES) and its experiment is a
  kept change that is the best now: a best caught later was never fit to keep, and is revoked.
- an experiment whose cancel was requested while it ran: recorded, not compared.

The noise-aware rule (docs/api.md, "Decisions"), for a candidate measured against its reference
(the best, or its own base when the best moved on):

- `sigma` is the run-to-run noise of val_bpb on this platform and harness, pooled over the
  measuring runs of every experiment with several (server/rules/noise_pool.py), with `df` degrees of
  freedom. A candidate with one run and no
  estimate gets another run; nothing is kept against an unknown noise.
- effect = candidate mean - reference mean, se = sigma * sqrt(1/n + 1/n_ref), t = effect / se,
  p = P(T_df <= t): the one-sided p-value that the candidate is not better.
- A change re-applied onto a new best keeps its runs on the bases it was measured on before
  (`Evidence`): its effect on each base is weighed by its precision, 1 / (1/n + 1/n_ref), so
  effect = the weighted mean of the effects, se = sigma / sqrt(sum of the weights), and its runs
  are all its runs, on every base.
- One run (the screening run): it earns a confirmation run when t < -SCREEN_MARGIN, else revert.
- Several runs: keep when p < ALPHA and effect < -MIN_DELTA (MIN_DELTA is the smallest effect
  worth keeping, on top of significance). Otherwise revert when the effect is significant but
  smaller than MIN_DELTA, when the candidate has MAX_RUNS runs, or when it is no longer promising
  (t > -FUTILITY_MARGIN); else another confirmation run.
- When the reference is not the best any more, a keep (or a candidate still promising) is
  re-applied onto the new best instead: `rebase`.

A run slowed by its machine (a busy host, a throttled GPU: fewer tokens in the time budget) only
ever reads worse. With RERUN_SLOWED_SIGMA set (off by default: docs/api.md says why), a run that
reads more than that many pooled sigmas worse than its reference (a candidate's: its base's
value; a run of the best: the best's own), after its worker's offset, is not counted and its
experiment runs again instead (`rerun`), at most MAX_RERUNS times per experiment, so that a
change that is truly that bad is still reverted (docs/research_night.md measured what it
restores). The decision then says how many were.

A candidate whose valid runs (two or more) all gave the same val_bpb ignores its seed and its
data: it is reverted as such, whatever its value (`_ignores_the_seed`).

The greedy rule is the single-run comparison of old: keep when val_bpb < reference - MIN_DELTA.
Either way, a run measured with another harness or on another platform is never compared, and
only `ok` runs with a val_bpb can be kept (so `over_budget` never is).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from statistics import NormalDist

import mpmath

from protocol.result import INTEGRITY_CLASSES
from protocol.states import Decision, Rule


class Action(StrEnum):
    """What the verdict asks for: a decision (the same word as protocol.states.Decision), or one
    more run of the candidate."""

    KEEP = Decision.KEEP.value
    REVERT = Decision.REVERT.value
    REBASE = Decision.REBASE.value  # better (or promising) against its base, but the best moved: re-apply it
    CONFIRM = "confirm"  # undecided: queue one more run of the candidate
    COUNT = "count"  # a run of a decided experiment: counted, nothing to decide
    CANCEL = "cancel"  # its cancel was requested while it ran: recorded, not compared
    REVOKE = "revoke"  # a kept best's later run ended in an integrity class: revert it, restore its base
    RERUN = "rerun"  # the run read as slowed: not counted, the experiment runs again (`rerun`)


# Verdicts that move the best or build on it: decided again on the locked, fresh project row
# (server/flows/results.py).
NEEDS_FRESH_BEST = frozenset({Action.KEEP, Action.REBASE, Action.REVOKE})
MAX_RERUNS = 2  # runs of one experiment presumed slowed and run again, at most


@dataclass(frozen=True)
class RuleSettings:
    rule: Rule
    alpha: float
    min_delta: float
    screen_margin: float  # standard errors the first run must beat the reference by
    futility_margin: float  # standard errors a confirming candidate must stay ahead by
    max_runs: int
    rerun_slowed: float = 0.0  # pooled sigmas worse than its reference a run is run again at (0: never)


@dataclass(frozen=True)
class Sample:
    """An experiment's valid runs: how many, and their mean (None without any); `identical`: two or
    more, all with the same val_bpb."""

    runs: int
    mean: float | None
    identical: bool = False


@dataclass(frozen=True)
class Provenance:
    """Where, when and under what conditions a commit's value was measured: its measuring runs'
    workers (their names), the first and the last of them, and the machines' speed readings
    (protocol.result.RunConditions) among them."""

    runs: int
    workers: tuple[str, ...]
    first: datetime
    last: datetime
    speeds: tuple[float, ...] = ()

    def in_words(self) -> str:
        """`4 runs on gpu0, gpu1, 2026-12-07 17:02-17:20 UTC, speed 40.1-41.5 GFLOP/s` (more than
        three workers: the first three and how many more)."""
        shown = ", ".join(self.workers[:3]) + (f" +{len(self.workers) - 3}" if len(self.workers) > 3 else "")
        start, end = f"{self.first:%Y-%m-%d %H:%M}", f"{self.last:%Y-%m-%d %H:%M}"
        when = start if end == start else f"{start}-{end[11:] if end[:10] == start[:10] else end}"
        words = f"{_runs(self.runs)} on {shown}, {when} UTC"
        if self.speeds:
            low, high = min(self.speeds), max(self.speeds)
            speed = f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}-{high:.1f}"
            words += f", speed {speed} GFLOP/s"
        return words


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


@dataclass(frozen=True)
class Reference:
    """What a candidate is compared with: the sample, and whether its commit was measured at all
    (a kept change whose repeats are not in yet has been measured, but has no sample yet)."""

    sample: Sample
    measured: bool
    provenance: Provenance | None = None


@dataclass(frozen=True)
class Evidence:
    """A re-applied change's runs on a former base, and that base's runs (its value)."""

    candidate: Sample
    reference: Sample


@dataclass(frozen=True)
class Noise:
    sigma: float
    df: int


@dataclass(frozen=True)
class JudgedRun:
    """The run that was just reported."""

    number: int
    status: str  # protocol.result.ResultStatus
    error_class: str | None
    val_bpb: float | None
    device: str
    harness_id: str
    cause: str | None = None  # a failed run's cause in one line (server/rules/failures.py)


@dataclass(frozen=True)
class Snapshot:
    settings: RuleSettings
    run: JudgedRun
    platform: str | None  # the project's pins (None: not pinned yet)
    harness_id: str | None
    candidate: Sample  # its valid runs, this one included
    # The best's runs, or its base's when the best moved on (crud/evidence.py, _reference_sample).
    reference: Sample
    reference_measured: bool  # the reference commit has a valid run, in the sample or not
    reference_is_best: bool
    is_baseline: bool  # the project's first best (no base): measured, not judged
    earlier: tuple[Evidence, ...]  # a re-applied change's runs on its former bases, newest first
    noise: Noise | None  # pooled over the measuring runs (server/crud/noise.py)
    decided: bool = False  # the experiment was decided before this run (the rest is then unread)
    cancel_requested: bool = False
    is_best: bool = False  # the experiment is the project's best now
    reruns: int = 0  # its runs presumed slowed and run again (`rerun`)
    reference_provenance: Provenance | None = None  # how the reference's value was measured


@dataclass(frozen=True)
class Slowdown:
    """A valid run as `rerun` reads it: its value less its worker's offset, the level it is measured
    against (None: not known yet) and what that is, the pooled noise, and the experiment's runs
    already presumed slowed."""

    number: int
    value: float
    level: float | None
    against: str  # "the best", "its base"
    sigma: float | None
    reruns: int


@dataclass(frozen=True)
class Comparison:
    mean: float  # the candidate's mean on its current base
    reference_mean: float
    runs: int  # on every base it was measured on (Evidence)
    reference_runs: int
    effect: float  # mean - reference_mean (pooled over its bases when re-applied): negative is better
    se: float | None  # None for the greedy rule
    t: float | None  # effect / se
    p_value: float | None
    upper_bound: float | None  # the effect's one-sided (1 - alpha) upper confidence bound
    sigma: float | None
    df: int | None


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str
    comparison: Comparison | None = None


def fmt_bpb(value: float | None) -> str:
    """At least 4 decimals, up to 6 when they matter: 1.0000, 0.9812, 0.98125."""
    if value is None:
        return "unmeasured"
    whole, decimals = f"{value:.6f}".split(".")
    return f"{whole}.{decimals.rstrip('0').ljust(4, '0')}"


def fmt_effect(comparison: Comparison) -> str:
    """`-0.0031 ± 0.0009 (3 vs 8 runs), p = 0.002`, or `-0.0031 (1 vs 1 runs)` without noise."""
    effect = f"{comparison.effect:+.4f}" if abs(comparison.effect) >= 5e-5 else f"{comparison.effect:+.2g}"
    runs = f"({comparison.runs} vs {comparison.reference_runs} runs)"
    if comparison.se is None or comparison.p_value is None:
        return f"{effect} {runs}"
    return f"{effect} ± {comparison.se:.4f} {runs}, p {fmt_p(comparison.p_value)}"


def fmt_p(p: float) -> str:
    """`= 0.002`, or `< 0.001` for smaller ones."""
    return f"= {p:.3f}" if p >= 0.001 else "< 0.001"


def t_cdf(df: int, t: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom, from the regularized incomplete beta
    function (mpmath: pure Python, already installed with torch; scipy would add 35 MB and numpy's
    threads to every process that reads the server's settings)."""
    if math.isinf(t):
        return 0.0 if t < 0 else 1.0
    tail = 0.5 * float(mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True))
    return tail if t < 0 else 1.0 - tail


def t_pdf(df: int, t: float) -> float:
    """The density of Student's t with `df` degrees of freedom."""
    log_scale = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_scale - (df + 1) / 2 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=1024)
def t_quantile(df: int, p: float) -> float:
    """The t with P(T <= t) = p, for p >= 0.5, by Newton's method on t_cdf (to about 1e-12).

    It starts from the normal quantile, which is below the t quantile (the t has heavier tails),
    and t_cdf is concave above 0, so the steps rise to the root without overshooting it: a few
    t_cdf evaluations where bisection took sixty.
    """
    assert 0.5 <= p < 1.0
    t = NormalDist().inv_cdf(p)
    for _ in range(200):
        step = (p - t_cdf(df, t)) / t_pdf(df, t)
        t += step
        if step <= 1e-12 * max(1.0, t):
            break
    return t


def run_counts(
    status: str,
    val_bpb: float | None,
    device: str,
    harness_id: str,
    platform: str | None,
    harness: str | None,
) -> bool:
    """Whether a run counts, for a keep, the noise and a best's value: it ended ok with a val_bpb,
    on the project's platform and harness (None: not pinned yet, so the run's own). The one
    statement of the rule; its SQL twin is server/crud/noise.py `counted_clause`, and `judge`
    explains a run that does not count (`_not_comparable`, `_not_valid`), tested to agree."""
    return (
        status == "ok"
        and val_bpb is not None
        and platform in (None, device)
        and harness in (None, harness_id)
    )


def rerun(slowdown: Slowdown, settings: RuleSettings) -> Verdict | None:
    """Action.RERUN when the run reads more than `rerun_slowed` pooled sigmas worse than its level
    and its experiment has had fewer than MAX_RERUNS such runs; None when it counts."""
    level, sigma = slowdown.level, slowdown.sigma
    if not settings.rerun_slowed or level is None or not sigma or slowdown.reruns >= MAX_RERUNS:
        return None
    excess = slowdown.value - level
    if excess <= settings.rerun_slowed * sigma:
        return None
    return Verdict(
        Action.RERUN,
        f"run {slowdown.number} read {excess:+.4f} ({excess / sigma:.1f} sigma) against "
        f"{slowdown.against} {fmt_bpb(level)}, after its worker's offset: presumed slowed, not counted, "
        f"run again (re-run {slowdown.reruns + 1} of at most {MAX_RERUNS})",
    )


def judge(snapshot: Snapshot) -> Verdict:
    """The verdict on an experiment after one of its runs was reported; a decision on a comparison
    says how the reference's value was measured (where, when, how fast the machines read), and
    how many of the candidate's runs were presumed slowed and run again."""
    verdict = _verdict(snapshot)
    if verdict.action in (Action.COUNT, Action.CANCEL, Action.REVOKE):
        return verdict
    reason = verdict.reason
    provenance = snapshot.reference_provenance
    if verdict.comparison is not None and provenance is not None and verdict.action is not Action.CONFIRM:
        reason += f"; {_reference_name(snapshot)} measured: {provenance.in_words()}"
    if snapshot.reruns:
        reason += f" ({_runs(snapshot.reruns)} presumed slowed, run again)"
    return replace(verdict, reason=reason)


def _verdict(snapshot: Snapshot) -> Verdict:
    if snapshot.decided:
        return _after_decision(snapshot)
    if snapshot.cancel_requested:
        return Verdict(Action.CANCEL, "cancelled while running; its result is recorded but not compared")
    settled = _not_comparable(snapshot) or _not_valid(snapshot) or _ignores_the_seed(snapshot)
    if settled is not None:
        return settled
    if snapshot.is_baseline:
        return _baseline(snapshot)
    if snapshot.reference.mean is None and not snapshot.reference_measured:
        what = "the best" if snapshot.reference_is_best else "its base"
        return _positive(snapshot, f"{what} has no valid run: any valid result replaces it")
    if snapshot.settings.rule == Rule.GREEDY:
        return _greedy(snapshot)
    return _noise_aware(snapshot)


def _after_decision(snapshot: Snapshot) -> Verdict:
    run = snapshot.run
    if run.error_class in INTEGRITY_CLASSES and snapshot.is_best and not snapshot.is_baseline:
        return Verdict(Action.REVOKE, f"run {run.number} ended {run.status} ({run.error_class})")
    return Verdict(Action.COUNT, "")


def _not_comparable(snapshot: Snapshot) -> Verdict | None:
    run = snapshot.run
    if snapshot.harness_id is not None and run.harness_id != snapshot.harness_id:
        return Verdict(
            Action.REVERT,
            f"measured with harness {run.harness_id!r}, the project's is {snapshot.harness_id}: not compared",
        )
    if snapshot.platform is not None and run.device != snapshot.platform:
        return Verdict(
            Action.REVERT,
            f"measured on {run.device!r}, the project's platform is {snapshot.platform!r}: not compared",
        )
    return None


def _not_valid(snapshot: Snapshot) -> Verdict | None:
    run = snapshot.run
    if run.status == "ok" and run.val_bpb is not None:
        return None
    said = ", ".join(part for part in (run.error_class, run.cause) if part)
    what = f"{run.status} ({said})" if said else run.status
    which = f"run {run.number}" if run.number > 1 else "run"
    return Verdict(Action.REVERT, f"{which} ended {what}: only ok results with a val_bpb can be kept")


def _ignores_the_seed(snapshot: Snapshot) -> Verdict | None:
    """Every run draws its own seed and its own order of the training data, so two valid runs of
    one train.py that give the same val_bpb to the last bit come from a model that neither uses
    ctx.seed nor learns from its data: luck pinned offline, which its repeats would only repeat.
    Refused, whatever its value (and server/rules/noise_pool.py leaves such runs out of the noise)."""
    candidate = snapshot.candidate
    if not candidate.identical or snapshot.is_baseline:
        return None
    return Verdict(
        Action.REVERT,
        f"ignores the seed: its {candidate.runs} valid runs all gave val_bpb {fmt_bpb(candidate.mean)}, "
        "though each run has its own seed and order of training data; use ctx.seed and train on "
        "ctx.loader's batches: refused",
    )


def _baseline(snapshot: Snapshot) -> Verdict:
    assert snapshot.run.val_bpb is not None
    if snapshot.reference_is_best:
        # Its later runs measure the noise and its value becomes their mean: say which run this is.
        return Verdict(Action.KEEP, f"baseline measured: first run val_bpb {fmt_bpb(snapshot.run.val_bpb)}")
    return Verdict(Action.REVERT, "baseline re-measured after the best moved on: not compared")


def _positive(snapshot: Snapshot, why: str, comparison: Comparison | None = None) -> Verdict:
    """Keep when measured on the best; when the best moved on, re-apply it there instead."""
    if snapshot.reference_is_best:
        return Verdict(Action.KEEP, f"{why}: kept", comparison)
    return Verdict(Action.REBASE, f"{why} against its base, but the best moved on", comparison)


def _greedy(snapshot: Snapshot) -> Verdict:
    candidate, reference = snapshot.candidate, snapshot.reference
    assert candidate.mean is not None and reference.mean is not None
    value, against, min_delta = snapshot.run.val_bpb, reference.mean, snapshot.settings.min_delta
    assert value is not None
    # This run alone against the reference, without noise: the effect, no se and no p-value.
    comparison = compare(Sample(1, value), reference, None, snapshot.settings.alpha)
    name = "best" if snapshot.reference_is_best else "its base"
    if value < against - min_delta:
        why = f"{fmt_bpb(value)} < {name} {fmt_bpb(against)} - {fmt_bpb(min_delta)}"
        if snapshot.reference_is_best:
            return Verdict(Action.KEEP, why, comparison)
        return Verdict(Action.REBASE, f"{why}, but the best moved on", comparison)
    return Verdict(
        Action.REVERT, f"{fmt_bpb(value)} >= {name} {fmt_bpb(against)} - {fmt_bpb(min_delta)}", comparison
    )


def compare(
    candidate: Sample,
    reference: Sample,
    noise: Noise | None,
    alpha: float,
    earlier: tuple[Evidence, ...] = (),
) -> Comparison:
    """effect ± se with the pooled noise (Student's t with its degrees of freedom), the one-sided
    p-value that the candidate is not better, and the effect's one-sided upper confidence bound.

    With `earlier` evidence (a re-applied change), the effect is the mean of its effects on each
    base weighted by their precision, 1 / (1/n + 1/n_ref), and its se is sigma / sqrt(sum of the
    weights): the runs on a former base count, as much as they are precise.
    """
    assert candidate.mean is not None and reference.mean is not None
    measured = [Evidence(candidate, reference)] + [
        e for e in earlier if e.candidate.mean is not None and e.reference.mean is not None
    ]
    weights = [1 / (1 / e.candidate.runs + 1 / e.reference.runs) for e in measured]
    differences = [(e.candidate.mean or 0.0) - (e.reference.mean or 0.0) for e in measured]  # all measured
    effect = sum(w * d for w, d in zip(weights, differences, strict=True)) / sum(weights)
    se = t = p_value = bound = None
    if noise is not None and noise.df >= 1:
        se = noise.sigma / math.sqrt(sum(weights))
        # No noise at all (identical runs everywhere): the sign of the effect says it all.
        t = effect / se if se > 0 else math.copysign(math.inf, effect) if effect else 0.0
        p_value = t_cdf(noise.df, t)
        bound = effect + t_quantile(noise.df, 1 - alpha) * se
    return Comparison(
        mean=candidate.mean,
        reference_mean=reference.mean,
        runs=sum(e.candidate.runs for e in measured),
        reference_runs=sum(e.reference.runs for e in measured),
        effect=effect,
        se=se,
        t=t,
        p_value=p_value,
        upper_bound=bound,
        sigma=None if noise is None else noise.sigma,
        df=None if noise is None else noise.df,
    )


def _noise_aware(snapshot: Snapshot) -> Verdict:
    settings = snapshot.settings
    if snapshot.reference.mean is None:
        what = "the best" if snapshot.reference_is_best else "its base"
        if snapshot.candidate.runs < settings.max_runs:
            return Verdict(Action.CONFIRM, f"{what} has no repeat yet: one more run before it is judged")
        return Verdict(
            Action.REVERT, f"{what} had no repeat after {snapshot.candidate.runs} runs: not judged"
        )
    comparison = compare(
        snapshot.candidate, snapshot.reference, snapshot.noise, settings.alpha, snapshot.earlier
    )
    runs = comparison.runs
    t, p_value = comparison.t, comparison.p_value
    if t is None or p_value is None:
        if runs < settings.max_runs:
            return Verdict(
                Action.CONFIRM, "no noise estimate yet: one more run before it is judged", comparison
            )
        return Verdict(Action.REVERT, f"no noise estimate after {runs} runs: not judged", comparison)
    stated = fmt_effect(comparison)
    if runs == 1:
        if t < -settings.screen_margin:
            return _promising(
                snapshot, f"{stated}: first run ahead by more than the screening margin", comparison
            )
        return Verdict(
            Action.REVERT,
            f"{stated}: first run not ahead of the {_reference_name(snapshot)} by the screening margin "
            f"({settings.screen_margin:g} standard errors): reverted",
            comparison,
        )
    significant = p_value < settings.alpha
    if significant and comparison.effect < -settings.min_delta:
        return _positive(snapshot, stated, comparison)
    if significant:
        return Verdict(
            Action.REVERT,
            f"{stated}: significant, but smaller than MIN_DELTA {fmt_bpb(settings.min_delta)}: reverted",
            comparison,
        )
    if runs >= settings.max_runs:
        return Verdict(
            Action.REVERT,
            f"{stated}: not significant after {runs} runs (alpha {settings.alpha:g}): reverted",
            comparison,
        )
    if t > -settings.futility_margin:
        return Verdict(
            Action.REVERT, f"{stated}: no longer promising after {runs} runs: reverted", comparison
        )
    return _promising(snapshot, f"{stated}: promising, not yet significant", comparison)


def _promising(snapshot: Snapshot, why: str, comparison: Comparison) -> Verdict:
    if snapshot.reference_is_best:
        return Verdict(Action.CONFIRM, f"{why}: one more run", comparison)
    return Verdict(Action.REBASE, f"{why} against its base, but the best moved on", comparison)


def _reference_name(snapshot: Snapshot) -> str:
    return "best" if snapshot.reference_is_best else "base"
