"""The noise-aware rule through a live server: the noise gets measured, promising candidates get
confirmation runs ahead of new submissions, keeps are stated as effect ± noise, and the queue,
leases and results keep their guarantees with several runs per experiment."""

from __future__ import annotations

import math
import subprocess
import threading
from collections import Counter

import mpmath
import numpy as np
import pytest

from client import ApiError
from server.main import create_app
from server.rules.noise_pool import BOUND
from tests.server.conftest import serve

# No calibration runs (tests/server/test_fleet_decisions.py): they would put runs of the best
# between the runs these tests hand to their workers.
NOISE = {
    "decision_rule": "noise_aware",
    "noise_runs": 3,
    "best_repeats": 3,
    "best_rerun_every": 0,
    "calibrate_every": 0,
}


def t_cdf(t: float, df: int) -> float:
    """Student's t CDF by integrating its density (mpmath.quad), independent of the server's
    incomplete-beta formula."""
    scale = mpmath.gamma((df + 1) / 2) / (mpmath.sqrt(df * mpmath.pi) * mpmath.gamma(df / 2))
    return float(mpmath.quad(lambda x: scale * (1 + x * x / df) ** (-(df + 1) / 2), [-mpmath.inf, t]))


def measure_noise(worker, values=(1.0, 1.002, 0.998)) -> None:  # type: ignore[no-untyped-def]
    """Run the baseline and its repeats (sigma 0.002 from these three values, 2 degrees of freedom)."""
    for value in values:
        worker.run_next(value)


@pytest.fixture
def measured(live_factory, worker_factory):  # type: ignore[no-untyped-def]
    """A noise-aware server whose noise is measured: (live server, its worker, an agent client)."""
    live = live_factory(**NOISE)
    worker = worker_factory(live)
    measure_noise(worker)
    return live, worker, live.client("agent")


def test_the_noise_is_measured_first_with_a_new_seed_for_every_run(
    live_factory, worker_factory, baseline_source: str
) -> None:
    live = live_factory(**NOISE)
    first, second = worker_factory(live, "gpu0"), worker_factory(live, "gpu1")
    agent = live.client("agent")
    idea = agent.submit("idea", train_py=baseline_source + "# idea\n")
    baseline = first.claim()
    assert (baseline.experiment_id, baseline.run) == (1, 1)
    assert second.claim() is None  # nothing is compared with an unmeasured best
    answer = first.report(baseline, 1.0)
    assert answer.decision == "keep" and answer.reason == "baseline measured: first run val_bpb 1.0000"
    runs = agent.experiment(1).runs
    assert [(r.number, r.kind, r.state) for r in runs] == [
        (1, "first", "finished"),
        (2, "repeat", "queued"),
        (3, "repeat", "queued"),
    ]
    repeats = [first.claim(), second.claim()]
    assert [(c.experiment_id, c.run) for c in repeats] == [(1, 2), (1, 3)]
    seeds = {baseline.seed, *(c.seed for c in repeats)}
    assert len(seeds) == 3 and all(0 <= seed < 2**31 for seed in seeds)
    assert worker_factory(live, "gpu2").claim() is None  # still measuring: the queue waits
    measured = [first.report(repeats[0], 1.002, seed=repeats[0].seed), second.report(repeats[1], 0.998)]
    # The baseline was decided by its first run: a repeat's answer says it decided nothing, not its reason.
    again = "run {0} of an experiment decided before it: {0} valid runs now, nothing to decide"
    assert [(m.decision, m.reason) for m in measured] == [("keep", again.format(n)) for n in (2, 3)]
    noise = agent.noise()
    assert noise.rule.decision_rule == "noise_aware" and noise.rule.noise_runs == 3
    (estimate,) = noise.estimates
    assert (estimate.platform, estimate.harness_id, estimate.current) == (
        "cpu",
        "test-harness",
        True,
    )
    assert (estimate.runs, estimate.experiments, estimate.df) == (3, 1, 2)
    assert estimate.sigma == pytest.approx(0.002, rel=1e-9)
    best = agent.best()
    assert (best.val_bpb, best.runs) == (pytest.approx(1.0), 3)
    assert best.se == pytest.approx(0.002 / math.sqrt(3))
    assert agent.leaderboard().noise == estimate
    results = [r.seed for r in (agent.experiment(1).runs)]
    assert results == [baseline.seed, *(c.seed for c in repeats)]
    claim = first.claim()
    assert claim.experiment_id == idea.id  # measured: open
    with pytest.raises(ApiError) as caught:  # a result must come from the run's own seed
        first.report(claim, 1.0, seed=claim.seed + 1)
    assert caught.value.status == 422 and caught.value.type.endswith("seed-mismatch")
    assert first.report(claim, 1.0).run == 1  # refused, nothing was recorded: the lease is still held


def test_a_promising_candidate_is_confirmed_ahead_of_newer_work_and_kept_as_effect_plus_minus_noise(
    measured, baseline_source: str
) -> None:
    _live, worker, agent = measured
    good = agent.submit("good", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 5"))
    later = agent.submit("later", train_py=baseline_source + "# later\n")
    screened = worker.run_next(0.994)
    assert (screened.experiment_id, screened.decision, screened.status) == (
        good.id,
        None,
        "queued",
    )
    assert "first run ahead by more than the screening margin: one more run" in screened.reason
    view = agent.experiment(good.id)
    assert [(r.number, r.kind, r.state) for r in view.runs] == [
        (1, "first", "finished"),
        (2, "confirmation", "queued"),
    ]
    assert view.queue_position == 0 and agent.experiment(later.id).queue_position == 1
    assert view.comparison.runs == 1 and view.comparison.reference_runs == 3
    claim = worker.claim()
    assert (claim.experiment_id, claim.run) == (good.id, 2)
    assert claim.seed != agent.experiment(good.id).runs[0].seed  # each run draws its own
    worker.client.send_progress(claim.lease_id, [{"step": 7, "loss": 3.0, "fraction": 0.5}])
    shown = agent.progress(good.id)
    assert shown.run == 2 and [e.step for e in shown.events] == [7]
    assert agent.experiment(good.id).status == "running"
    kept = worker.report(claim, 0.995)
    # Independently: sigma is the baseline's (m2 8e-6, 2 df); the candidate's own runs (its first
    # one chosen by the screen) are not noise measurements.
    sigma = math.sqrt(8e-6 / 2)
    se = sigma * math.sqrt(1 / 2 + 1 / 3)
    p = t_cdf(-0.0055 / se, 2)
    assert kept.decision == "keep" and kept.run == 2
    # The decision says how the best's value was measured (the baseline's runs, on this worker).
    assert kept.reason.startswith(
        f"-0.0055 ± {se:.4f} (2 vs 3 runs), p = {p:.3f}: kept; best measured: 3 runs on gpu0, "
    )
    view = agent.experiment(good.id)
    comparison = view.comparison
    assert comparison.effect == pytest.approx(-0.0055) and comparison.se == pytest.approx(se)
    assert comparison.p_value == pytest.approx(p, rel=1e-6) and comparison.sigma_df == 2
    assert comparison.upper_bound < 0 and view.val_bpb == pytest.approx(0.9945)
    assert view.best_before.model_dump() == {
        "commit": agent.experiment(1).commit,
        "val_bpb": pytest.approx(1.0),
    }
    # Its runs are the best's runs now, and it gets NOISE_RUNS repeats: its own runs were chosen
    # for being good, so only its repeats make the value that later candidates are compared with.
    best = agent.best()
    assert (best.experiment_id, best.runs, best.val_bpb) == (good.id, 2, pytest.approx(0.9945))
    assert [r.kind for r in view.runs] == ["first", "confirmation", "repeat", "repeat", "repeat"]
    for number, value in ((3, 0.9946), (4, 0.9952), (5, 0.9950)):
        repeat = worker.claim()
        assert (repeat.experiment_id, repeat.run) == (good.id, number)
        answer = worker.report(repeat, value)
        assert (answer.decision, answer.status) == ("keep", "kept")  # a repeat decides nothing
    assert agent.best().runs == 5
    # Its repeats measure the noise too: they join the baseline's runs in the pooled estimate.
    repeats = [0.9946, 0.9952, 0.9950]
    m2 = sum((value - sum(repeats) / 3) ** 2 for value in repeats)
    (estimate,) = agent.noise().estimates
    assert (estimate.df, estimate.runs, estimate.experiments) == (4, 6, 2)
    assert estimate.sigma == pytest.approx(math.sqrt((8e-6 + m2) / 4), rel=1e-9)
    moved = worker.run_next(0.9949)  # `later`, re-applied onto the new best before it ran
    compared = agent.experiment(moved.experiment_id)
    assert compared.description == "later" and compared.best_before.commit == best.commit
    assert compared.comparison.reference_runs == 3
    assert compared.best_before.val_bpb == pytest.approx((0.9946 + 0.9952 + 0.9950) / 3)
    tsv = agent.results_tsv().splitlines()
    row = next(line.split("\t") for line in tsv if line.split("\t")[4] == "good")
    assert row[3] == "keep" and row[5] == "5" and float(row[6]) == pytest.approx(-0.0055, abs=1e-6)
    assert (
        float(row[7]) == pytest.approx(se, abs=1e-6)
        and row[8] == "3"
        and float(row[9]) == pytest.approx(p, rel=1e-3)
        and row[10] == kept.reason
    )


def test_screened_out_futile_and_failed_candidates_are_reverted_with_their_reason(
    measured, baseline_source: str
) -> None:
    _live, worker, agent = measured
    for i in range(4):
        agent.submit(f"idea {i}", train_py=baseline_source + f"# idea {i}\n")
    screened = worker.run_next(0.9995)  # ahead by 0.2 standard errors only
    assert (
        screened.decision == "revert"
        and "first run not ahead of the best by the screening margin" in screened.reason
    )
    assert screened.reason.startswith("-0.0005 ± 0.0023 (1 vs 3 runs), p = ")
    worker.run_next(0.994)  # promising...
    futile = worker.run_next(1.004)  # ...but its second run is no better than the best
    assert futile.decision == "revert" and "no longer promising after 2 runs" in futile.reason
    over = worker.run_next(0.9, status="over_budget", error_class="over_budget")
    assert over.decision == "revert" and "ended over_budget (over_budget)" in over.reason
    worker.run_next(0.994)
    crashed = worker.run_next(None, status="crash", error_class="out_of_memory")  # its confirmation run
    assert crashed.decision == "revert" and crashed.reason.startswith("run 2 ended crash (out_of_memory)")
    assert agent.best().experiment_id == 1


def test_one_far_run_of_the_best_counts_only_a_few_sigmas_from_its_others(
    live_factory, worker_factory, baseline_source: str
) -> None:
    """A best's value is the mean of its runs, each bounded at BOUND pooled sigmas from their
    median (server/rules/noise_pool.py): a lucky far-low repeat does not pin it."""
    live = live_factory(**(NOISE | {"noise_runs": 6}))
    worker = worker_factory(live)
    runs = (1.0, 1.002, 0.998, 1.001, 0.999, 0.95)
    measure_noise(worker, runs)
    agent = live.client("agent")
    (estimate,) = agent.noise().estimates
    middle = float(np.median(runs))
    bounded = float(np.clip(runs, middle - BOUND * estimate.sigma, middle + BOUND * estimate.sigma).mean())
    assert bounded > float(np.mean(runs)) + 0.0005  # the far run counts, but closer
    candidate = agent.submit("idea", train_py=baseline_source + "# idea\n")
    worker.run_next(0.997)
    view = agent.experiment(candidate.id)
    assert view.best_before is not None and view.best_before.val_bpb == pytest.approx(bounded, rel=1e-12)
    assert view.comparison.effect == pytest.approx(0.997 - bounded, rel=1e-9)
    assert view.comparison.reference_runs == 6


def test_cancelling_a_candidate_drops_its_queued_confirmation_run(measured, baseline_source: str) -> None:
    _live, worker, agent = measured
    experiment = agent.submit("idea", train_py=baseline_source + "# idea\n")
    worker.run_next(0.994)
    assert agent.cancel(experiment.id).experiment.status == "cancelled"
    assert [r.state for r in agent.experiment(experiment.id).runs] == ["finished", "cancelled"]
    assert worker.claim() is None


def test_a_result_of_a_confirmation_run_is_recorded_once(measured, baseline_source: str) -> None:
    _live, worker, agent = measured
    agent.submit("idea", train_py=baseline_source + "# idea\n")
    worker.run_next(0.994)
    claim = worker.claim()
    result = {"status": "ok", "val_bpb": 0.995, "device": "cpu", "harness_id": "test-harness"}
    first = worker.client.result(claim.lease_id, "6f1c6e3a-52a5-4c49-9a3e-3a6a2b9d0c11", result)
    again = worker.client.result(claim.lease_id, "6f1c6e3a-52a5-4c49-9a3e-3a6a2b9d0c11", result)
    assert again == first and first.run == 2
    assert agent.best().runs == 2  # counted once: the candidate's 2 runs are the best's now


def test_a_candidate_whose_base_is_no_longer_the_best_is_re_applied_if_promising(
    live_factory, worker_factory, baseline_source: str
) -> None:
    live = live_factory(**NOISE)
    workers = [worker_factory(live, f"gpu{i}") for i in range(2)]
    agent = live.client("agent")
    measure_noise(workers[0])
    deeper = agent.submit("deeper", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 6"))
    wider = agent.submit("wider", train_py=baseline_source + "WIDTH = 128\n")
    first, second = workers[0].claim(), workers[1].claim()
    workers[0].report(first, 0.99)  # the first runs, promising: a confirmation run each
    workers[1].report(second, 0.994)
    first, second = workers[0].claim(), workers[1].claim()  # deeper's, wider's
    workers[0].report(first, 0.9902)  # deeper: kept (two runs that differ, as runs with their own seeds do)
    assert agent.best().experiment_id == deeper.id
    moved = workers[1].report(second, 0.9942)  # wider, better than its base: re-applied
    assert moved.decision == "rebase" and "re-applied onto the new best" in moved.reason
    requeued = agent.experiment(agent.experiment(wider.id).rebased_to)
    assert requeued.base == agent.experiment(deeper.id).commit and requeued.status == "queued"
    for value in (0.99, 0.9902, 0.9898):
        workers[0].run_next(value)  # deeper's repeats (BEST_REPEATS 3): its value, 0.99
    answer = workers[0].run_next(0.985)  # wider on deeper: its confirmation run on the baseline counts
    comparison = agent.experiment(requeued.id).comparison
    assert (comparison.runs, comparison.reference_runs) == (2, 3 + 3), answer
    # Effects -0.0058 (1 vs 3 runs, weight 3/4) on the baseline (the screening run left out),
    # -0.005 (1 vs 3) on deeper.
    assert comparison.effect == pytest.approx(-0.0054, abs=1e-9)
    # The baseline's spread (8e-6 over 2 df) and deeper's repeats' (8e-8 over 2 df).
    sigma = math.sqrt((8e-6 + 8e-8) / 4)
    assert comparison.sigma == pytest.approx(sigma, rel=1e-9)
    assert comparison.se == pytest.approx(sigma / math.sqrt(3 / 4 + 3 / 4), rel=1e-9)


def test_results_arriving_together_never_both_advance_best(
    live_factory, worker_factory, baseline_source, database_url
) -> None:
    """Under the noise-aware rule, too: keeps are decided one at a time on the fresh best."""
    live = live_factory(database_url, **NOISE)
    workers = [worker_factory(live, f"gpu{i}") for i in range(4)]
    agent = live.client("agent")
    measure_noise(workers[0])
    ids = [agent.submit(f"idea {i}", train_py=baseline_source + f"# idea {i}\n").id for i in range(4)]
    firsts = [w.claim() for w in workers]
    for worker, claim in zip(workers, firsts, strict=True):
        worker.report(claim, 0.9902)  # each first run is promising: a confirmation run each
    claims = [w.claim() for w in workers]
    assert sorted(c.experiment_id for c in claims) == ids and {c.run for c in claims} == {2}
    barrier = threading.Barrier(len(workers))
    answers: list[dict] = [{}] * len(workers)

    def report(i: int) -> None:
        barrier.wait()
        answers[i] = workers[i].report(claims[i], 0.99)

    threads = [threading.Thread(target=report, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(a.decision for a in answers) == {"keep": 1, "rebase": 3}, answers
    repo = str(live.settings.resolved_research_repo)
    parent = subprocess.run(
        ["git", "-C", repo, "rev-parse", "best^"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert parent == agent.experiment(1).commit  # one fast-forward from the baseline


def test_the_best_is_run_again_as_candidates_pile_up_on_it(
    live_factory, worker_factory, baseline_source
) -> None:
    live = live_factory(**{**NOISE, "best_rerun_every": 2})
    worker, agent = worker_factory(live), live.client("agent")
    measure_noise(worker)
    for i in range(4):
        agent.submit(f"idea {i}", train_py=baseline_source + f"# idea {i}\n")
    kinds = [r.kind for r in agent.experiment(1).runs]
    assert kinds == ["first", "repeat", "repeat", "repeat", "repeat"]  # one more per two submissions
    assert worker.claim().experiment_id == 1  # the best's runs go ahead of the candidates


def test_switching_from_the_greedy_rule_measures_the_noise_at_start(live_factory, worker_factory) -> None:
    live = live_factory()  # greedy, as the other server tests
    worker_factory(live).run_next(1.0)
    assert [r.kind for r in live.client().experiment(1).runs] == ["first"]
    live.ctx.repo.close()
    restarted = create_app(live.settings.model_copy(update=NOISE))
    with serve(restarted), restarted.state.ctx.db.read() as session:
        from server.crud.runs import runs_of

        assert [r.kind for r in runs_of(session, [1])[0][1]] == ["first", "repeat", "repeat"]


def test_a_change_queued_on_a_former_best_runs_on_the_current_one(measured, baseline_source: str) -> None:
    """No run is spent on an old best: a waiting change is re-applied before it runs. A change
    submitted on another commit on purpose (not a former best) runs where it was put."""
    _live, worker, agent = measured
    side = agent.submit("side", train_py=baseline_source + "# side\n")
    worker.run_next(1.003)  # reverted at its screening run: a commit that never was the best
    deeper = agent.submit("deeper", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 6"))
    waiting = agent.submit("wider", train_py=baseline_source + "WIDTH = 96\n")
    on_side = agent.submit(
        "on the side commit", train_py=baseline_source + "# side\n# more\n", base=side.commit
    )
    worker.run_next(0.99)
    worker.run_next(0.9902)  # deeper's confirmation: the best moves
    assert agent.best().experiment_id == deeper.id
    for number in (3, 4, 5):  # the new best's repeats go first
        repeat = worker.claim()
        assert (repeat.experiment_id, repeat.run) == (deeper.id, number)
        worker.report(repeat, 0.99 + 0.0001 * number)
    claim = worker.claim()
    moved = agent.experiment(waiting.id)
    assert (moved.status, moved.runs[0].state) == ("rebased", "cancelled")
    assert moved.reason.startswith("the best moved before it ran (from ")
    assert claim.experiment_id == moved.rebased_to and claim.run == 1
    assert agent.experiment(claim.experiment_id).base == agent.best().commit
    worker.report(claim, 0.991)  # not ahead: reverted (within 3 sigma: not presumed slowed)
    assert worker.claim().experiment_id == on_side.id  # its base was never the best: it runs there


def test_autoresearch_status_shows_the_noise_and_each_decision_as_effect_plus_minus_noise(
    live_factory, worker_factory, baseline_source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.kit.cli_process import in_process

    live = live_factory(**NOISE)
    worker, agent = worker_factory(live), live.client("agent")
    before = in_process(capsys, "status", server=live.url)
    assert "noise: not measured yet" in before.out
    measure_noise(worker)
    good = agent.submit("good", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 5"))
    worker.run_next(0.994)
    kept = worker.run_next(0.995)
    overview = in_process(capsys, "status", server=live.url)
    assert overview.code == 0, overview.err
    best = agent.best()
    assert f"best: val_bpb 0.994500 ± {best.se:.4f} (experiment {good.id}, mean of 2 runs" in overview.out
    assert "noise: sigma 0.0020 from 3 runs of 1 experiment (cpu)" in overview.out  # the baseline's
    row = next(line for line in overview.out.splitlines() if line.startswith(f"{good.id} "))
    assert "-0.0055 ± 0.0018" in row and " 2 " in row
    detail = in_process(capsys, "status", str(good.id), server=live.url)
    assert f"experiment {good.id} kept: val_bpb 0.994500 (mean of 2 runs) ({kept.reason})" in detail.out
    assert "  effect:       -0.0055 ± 0.0018 (2 vs 3 runs), p = 0.0" in detail.out
    assert "  runs:         1 first finished 0.994000 seed " in detail.out
