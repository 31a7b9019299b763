"""The agent-side CLI against a real server and a real worker: submit, status, best, export, import,
similar, search, and the random agent's research loop (`autoresearch agent --strategy random`).

Everything on the server side runs for real: `autoresearch serve` with SQLite on a free port and a
sandboxed CPU worker on the `test` preset, one project for the whole file. Submissions and the
agent run as subprocesses, exactly as a user types them; the other commands run through cli.main
in this process (the same code, without a Python start-up per call).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli import views
from client import Client
from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from server.crud.tsv import COLUMNS, DECISION_COLUMNS
from testkit.candidates import bigram
from testkit.processes import Project, init_project, serve, wait_until
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)
from tests.kit.cli_process import BASELINE_LR, cli, in_process, token, write

pytestmark = pytest.mark.heavy

FINAL = {"kept", "reverted", "rebased", "stale", "cancelled", "infra_failed"}


def patch_of(old: str, new: str) -> str:
    diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/train.py", "b/train.py")
    return "".join(diff)


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> Iterator[Project]:
    """A server whose baseline is a cheap bigram (LEARNING_RATE = BASELINE_LR), with one worker
    running; it ends with this file."""
    settings, _paths = test_data
    tmp = tmp_path_factory.mktemp("kit-project")
    project = serve(init_project(tmp, settings, bigram(BASELINE_LR)), settings, lease_seconds=30.0)
    try:
        project.worker("kit-worker")
        yield project
    finally:
        project.close()


@pytest.fixture(scope="module")
def submitted(project: Project, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A patch submitted with --wait --json (the baseline runs first), then an edited train.py
    with -q, then the same train.py again."""
    tmp = tmp_path_factory.mktemp("submissions")
    patch = write(tmp / "lr.patch", patch_of(bigram(BASELINE_LR), bigram(0.03)))
    waited = cli(
        *("submit", str(patch), "-m", "lr 0.03", "--hypothesis", "a smaller step is steadier"),
        *("--wait", "--json", "--timeout", "240"),
        server=project.url,
        token=project.agent_token,
    )
    assert waited.returncode in (0, 3), waited.stderr
    edited = write(tmp / "train.py", bigram(0.08))
    quiet = cli("submit", str(edited), "-m", "lr 0.08", "-q", server=project.url, token=project.agent_token)
    assert quiet.returncode == 0, quiet.stderr
    # On the base it was submitted on: with the best as its base, it would be an empty change once
    # the worker has kept it, which it can before this second submission is in.
    base = project.experiment(int(quiet.stdout)).base
    again = cli(
        *("submit", "-", "-m", "same again", "--base", base),
        stdin=bigram(0.08),
        server=project.url,
        token=project.agent_token,
    )
    patch_id = json.loads(waited.stdout)["id"]  # stdout is the final experiment as JSON, and only that
    return {
        "patch_id": patch_id,
        "waited": waited,
        "edited_id": int(quiet.stdout),
        "quiet": quiet,
        "again": again,
    }


def test_submit_prints_the_experiment_id(
    project: Project, submitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert submitted["quiet"].stdout.strip().isdigit()  # -q: only the id
    assert submitted["edited_id"] != submitted["patch_id"]
    assert project.experiment(submitted["edited_id"]).description == "lr 0.08"
    diff = in_process(capsys, "status", str(submitted["edited_id"]), "--diff", server=project.url)
    assert "+LEARNING_RATE = 0.08" in diff.out


def test_submit_wait_follows_the_experiment_to_its_decision(
    project: Project, submitted: dict[str, Any]
) -> None:
    report, printed = submitted["waited"].stderr, json.loads(submitted["waited"].stdout)
    final = project.experiment(submitted["patch_id"])
    assert final.status in FINAL and printed["status"] == final.status
    assert final.hypothesis == "a smaller step is steadier" == printed["hypothesis"]
    # With --json the live report goes to stderr, so that stdout parses.
    assert report.startswith(f"experiment {final.id} queued")
    assert f"experiment {final.id}: started (attempt " in report
    assert f"experiment {final.id}: finished: {final.result.status}" in report
    assert submitted["waited"].returncode == (0 if final.status == "kept" else 3)


def test_a_reader_that_goes_away_ends_the_command_quietly(project: Project, capsys) -> None:
    """`autoresearch status | head -1`: the pipe closes under the command; no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as closed_pipe, pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", closed_pipe)
        outcome = in_process(capsys, "status", server=project.url)
    assert outcome.code == 141 and "Traceback" not in outcome.err, outcome


def test_an_identical_train_py_is_not_queued_again(submitted: dict[str, Any]) -> None:
    again = submitted["again"]
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"experiment {submitted['edited_id']}: this train.py was already")


def test_status_lists_the_experiments_and_details_one(
    project: Project, submitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    overview = in_process(capsys, "status", server=project.url)
    assert overview.code == 0, overview.err
    assert overview.out.startswith("best: val_bpb ")
    rows = {line.split()[0]: line for line in overview.out.splitlines() if line[:1].isdigit()}
    assert "lr 0.08" in rows[str(submitted["edited_id"])]
    assert "lr 0.03" in rows[str(submitted["patch_id"])]

    detail = in_process(capsys, "status", str(submitted["patch_id"]), "--log", "--diff", server=project.url)
    assert detail.code == 0, detail.err
    assert "  hypothesis:   a smaller step is steadier" in detail.out
    assert "-LEARNING_RATE = 0.05\n+LEARNING_RATE = 0.03" in detail.out
    assert "  result:       val_bpb " in detail.out


def test_best_prints_and_writes_the_best_train_py(
    project: Project, submitted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The last submission (sent without --wait) decided first: keeping it would move the best
    # between the reads below (it did, once, on CI's loaded machine).
    project.final(submitted["edited_id"])
    with project.agent() as client:
        best = client.best()
    printed = in_process(capsys, "best", server=project.url)
    assert printed.code == 0, printed.err
    assert printed.out == best.train_py
    assert f"commit {best.commit}" in printed.err
    written = in_process(capsys, "best", "-o", str(tmp_path / "best.py"), server=project.url)
    assert written.code == 0, written.err
    assert (tmp_path / "best.py").read_text() == best.train_py


def test_export_gives_results_tsv_and_import_brings_it_back(
    project: Project, submitted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project.final(submitted["edited_id"])
    tsv = tmp_path / "results.tsv"
    exported = in_process(capsys, "export", "-o", str(tsv), server=project.url)
    assert exported.code == 0 and exported.out == "" and f"wrote 3 results to {tsv}" in exported.err
    lines = tsv.read_text().splitlines()
    # autoresearch's five columns, then the decision's (docs/api.md, "results.tsv")
    assert lines[0].split("\t") == [*COLUMNS, *DECISION_COLUMNS]
    rows = lines[1:]
    assert len(rows) == 3  # the baseline and both submissions have results
    width = len(COLUMNS) + len(DECISION_COLUMNS)
    assert all(
        len(row.split("\t")) == width and row.split("\t")[3] in ("keep", "discard", "crash") for row in rows
    )
    assert [row.split("\t")[4] for row in rows] == ["baseline", "lr 0.03", "lr 0.08"]

    imported = in_process(capsys, "import", str(tsv), server=project.url, token=project.admin_token)
    assert imported.code == 0, imported.err
    assert imported.out.startswith(f"imported 3 rows from {tsv}; skipped 0")
    # Imported rows are history: listed first, apart from (and never compared with) the experiments,
    # with autoresearch's five columns and no decision of this server's.
    header, *again = in_process(capsys, "export", server=project.url).out.splitlines()
    history, experiments = again[: len(rows)], again[len(rows) :]
    assert header == lines[0] and experiments == rows
    five = len(COLUMNS)
    assert [row.split("\t")[:five] for row in history] == [row.split("\t")[:five] for row in rows]
    assert all(set(row.split("\t")[five:]) == {""} for row in history)
    again = in_process(capsys, "import", str(tsv), "--json", server=project.url, token=project.admin_token)
    assert json.loads(again.out) == {"imported": 0, "skipped": 3}


def test_errors_name_the_fix(project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_server = cli("status")  # as a subprocess: the message and exit status a user sees
    assert no_server.returncode == 1
    assert "give the server URL with --server or $AUTORESEARCH_SERVER" in no_server.stderr

    def error(*args: str, token: str | None = "t") -> str:
        outcome = in_process(capsys, *args, server=project.url, token=token)
        assert outcome.code == 1
        return outcome.err

    train_py = str(write(tmp_path / "t.py", bigram(0.2)))
    assert "give a token with --token or $AUTORESEARCH_TOKEN" in error(
        "submit", train_py, "-m", "x", token=None
    )
    wrong_token = error("submit", train_py, "-m", "x", token="nope")
    assert "401" in wrong_token and "check --token" in wrong_token
    assert f"{tmp_path / 'absent.patch'}: no such file" in error(
        "submit", str(tmp_path / "absent.patch"), "-m", "x"
    )
    words = str(write(tmp_path / "notes.txt", "just some words\n"))
    forced = error("submit", words, "--as", "patch", "-m", "x")
    assert "is not a unified diff" in forced and "git diff" in forced
    bad_patch = str(write(tmp_path / "bad.patch", patch_of("X = 1\n", "X = 2\n")))
    refused = error("submit", bad_patch, "-m", "x", token=project.agent_token)
    assert refused.startswith("autoresearch submit: the server refused: 422")
    assert "no experiment 999999" in error("status", "999999", token=None)
    not_admin = error("import", words, token=project.agent_token)
    assert "403" in not_admin and "admin" in not_admin
    unreachable = in_process(capsys, "best", server="http://127.0.0.1:9")
    assert "cannot reach the server at http://127.0.0.1:9" in unreachable.err


def test_status_on_best_shows_what_is_tried_on_the_best(
    project: Project, submitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    project.final(submitted["edited_id"])  # the queue is empty: the best stays put below
    with project.agent() as client:
        best = client.best()
        fresh = client.submit("lr 0.5 on the best", train_py=bigram(0.5), base=best.commit)
        try:
            shown = in_process(capsys, "status", "--on-best", "--json", server=project.url)
        finally:  # not needed to run: the listing is what is tested
            cancelled = in_process(
                capsys, "cancel", str(fresh.id), "--json", server=project.url, token=project.agent_token
            )
    listed = json.loads(shown.out)["experiments"]
    assert fresh.id in [experiment["id"] for experiment in listed]
    assert all(experiment["base"] == best.commit for experiment in listed)
    answer = json.loads(cancelled.out)  # cancelled if still queued; its worker stops it if it runs
    assert cancelled.code == 0 and answer["id"] == fresh.id, cancelled
    assert answer["status"] == "cancelled" or answer["cancel_requested"], answer


def test_near_misses_and_keep_rates_print_what_the_api_answers(
    project: Project, submitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    project.final(submitted["edited_id"])
    with project.agent() as client:
        # Kinds are stored by a background task shortly after each decision: both changes counted.
        wait_until(lambda: client.keep_rates().overall.tried >= 2, 30, "both changes summarised")
        near, rates = client.near_misses(), client.keep_rates()
    for command, answer in (("near-misses", near), ("keep-rates", rates)):
        as_json = in_process(capsys, command, "--json", server=project.url)
        assert as_json.code == 0 and json.loads(as_json.out) == answer.model_dump(mode="json"), as_json
    table = in_process(capsys, "keep-rates", server=project.url).out
    overall = rates.overall
    assert table.startswith(f"overall: {overall.kept} kept of {overall.tried} tried") and overall.tried >= 2
    assert "LEARNING_RATE" in table  # the submissions moved the learning rate
    listed = in_process(capsys, "near-misses", server=project.url).out
    assert listed.startswith("no near misses") == (not near.items)


def test_wait_and_progress_print_what_the_sdk_answers(
    project: Project, submitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    patch_id, edited_id = submitted["patch_id"], submitted["edited_id"]
    project.final(edited_id)
    with project.agent() as client:
        decided = client.wait(edited_id, patch_id, timeout=5)
        curve = client.progress(edited_id)
    waited = in_process(capsys, "wait", str(edited_id), str(patch_id), "--json", server=project.url)
    assert waited.code == 0 and json.loads(waited.out) == [e.model_dump(mode="json") for e in decided]
    assert [e.id for e in decided] == [edited_id, patch_id]  # any of several: here both, in the order given
    as_text = in_process(capsys, "wait", str(patch_id), server=project.url)
    assert as_text.code == 0 and as_text.out == views.summary(decided[1]) + "\n"
    missing = in_process(capsys, "wait", "999999", server=project.url)
    assert missing.code == 1 and "999999" in missing.err and not missing.out

    as_json = in_process(capsys, "progress", str(edited_id), "--json", server=project.url)
    assert as_json.code == 0 and json.loads(as_json.out) == curve.model_dump(mode="json")
    assert curve.run is not None and len(curve.events) >= 2  # a trained run reports as it goes
    head, *samples = in_process(
        capsys, "progress", str(edited_id), "--points", "2", server=project.url
    ).out.splitlines()
    assert head == f"experiment {edited_id}, run {curve.run}: {len(curve.events)} samples"
    assert [line.split(" s  ", 1)[1] for line in samples] == [
        views.progress(curve.events[0]),
        views.progress(curve.events[-1]),
    ]


def test_random_agent_submits_mutations_of_the_best_and_learns_the_decisions(project: Project) -> None:
    agent_token = token(project, "agent", "random-control")
    done = cli(
        "agent",
        "--strategy",
        "random",
        "--count",
        "2",
        "--seed",
        "3",
        "--poll",
        "0.3",
        server=project.url,
        token=agent_token,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    submitted = [
        int(n) for n in re.findall(r"^submitted experiment (\d+): LEARNING_RATE ", done.stdout, re.M)
    ]
    decided = re.findall(
        r"^experiment (\d+) (kept|reverted|stale|rebased|cancelled|infra_failed): ", done.stdout, re.M
    )
    assert len(submitted) == 2 and len(decided) == 2, done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("submitted 2, decided 2, kept ")

    with Client(project.url) as client:
        for experiment_id in submitted:
            experiment = client.experiment(experiment_id)
            assert experiment.agent == "random-control"
            assert experiment.description.startswith("random: LEARNING_RATE 0.")
            changed = [
                line
                for line in client.diff(experiment_id).splitlines()
                if line[:1] in "+-" and not line.startswith(("+++", "---"))
            ]
            # The bigram's only constant is the learning rate: exactly that line changes.
            assert len(changed) == 2 and all("LEARNING_RATE = " in line for line in changed), changed
        standing = {row.agent: row for row in client.agents().agents}
    assert standing["random-control"].submitted == 2


# `similar` and `search`, and what `submit` says was tried before. Learning rates near 0.6 keep
# these apart from the other tests' changes here (0.019-0.2).


def test_similar_before_submitting_and_for_an_experiment_and_what_submit_prints(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with project.agent() as agent:
        tried = agent.submit("lr 0.6", train_py=bigram(0.6))
    nearby = write(tmp_path / "train.py", bigram(0.61))
    asked = in_process(capsys, "similar", str(nearby), server=project.url)
    assert asked.code == 0, asked.err
    head, first, *others = asked.out.splitlines()
    assert head == f"{1 + len(others)} similar experiment(s), most alike first:"
    assert first.startswith(f"  #{tried.id} ") and first.endswith(
        "nearby_constants, LEARNING_RATE 0.6 (here 0.61) - lr 0.6"
    )
    # The other tests' raises of the learning rate went the same way, not as far.
    assert all(": same_direction, " in line for line in others), others
    as_json = in_process(capsys, "similar", str(nearby), "--json", server=project.url)
    found = json.loads(as_json.out)["similar"]
    assert [s["experiment_id"] for s in found][:1] == [tried.id]
    assert {s["kind"] for s in found[1:]} <= {"same_direction"}
    empty = cli("similar", "-", stdin="", server=project.url)
    assert empty.returncode == 1 and "autoresearch similar: standard input is empty" in empty.stderr
    # A change of code no other made (every learning rate here was moved one way or the other).
    new_code = bigram(0.95).replace("\nimport time\n", "\nimport time  # for the clock\n")
    untried = in_process(capsys, "similar", str(write(tmp_path / "far.py", new_code)), server=project.url)
    assert untried.out == "not tried: no experiment made this change or a similar one\n"
    with project.agent() as agent:
        alone = agent.submit("lr 0.95, commented", train_py=new_code).id
        agent.cancel(alone)  # asked about, not run
    of_alone = in_process(capsys, "similar", "-e", str(alone), server=project.url)
    assert of_alone.out == f"no other experiment made the change of experiment {alone} or a similar one\n"

    submitted = cli("submit", str(nearby), "-m", "lr 0.61", server=project.url, token=project.agent_token)
    assert submitted.returncode == 0, submitted.stderr
    assert "tried before (most alike first):\n" in submitted.stdout
    assert f"  #{tried.id} " in submitted.stdout
    new_id = int(submitted.stdout.split()[1])
    of_tried = in_process(capsys, "similar", "-e", str(tried.id), server=project.url)
    assert f"  #{new_id} " in of_tried.out


def test_similar_refuses_what_it_cannot_use(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = in_process(capsys, "similar", "x.py", "-e", "1", server=project.url)
    assert both.code == 1 and "give FILE (a patch or a train.py) or --experiment ID, not both" in both.err
    missing = in_process(capsys, "similar", str(tmp_path / "nope.py"), server=project.url)
    assert missing.code == 1 and f"autoresearch similar: {tmp_path / 'nope.py'}: no such file" in missing.err
    unknown = in_process(capsys, "similar", "-e", "99999", server=project.url)
    assert unknown.code == 1 and "99999" in unknown.err
    for text in ("not json", '[{"old": "x"}]', "[]"):
        bad = in_process(capsys, "similar", str(write(tmp_path / "edits.json", text)), server=project.url)
        assert bad.code == 1 and f"autoresearch similar: {tmp_path / 'edits.json'}: " in bad.err, bad.err
        assert "not JSON" in bad.err or 'give a JSON list of edits, [{"old": "...", "new": "..."}]' in bad.err


def test_edits_as_json_are_a_change_like_a_patch(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with project.agent() as agent:
        best = agent.best().train_py
    line = next(line for line in best.splitlines() if line.startswith("LEARNING_RATE = "))
    edits = [{"old": line, "new": "LEARNING_RATE = 0.613"}]
    asked = in_process(
        capsys, "similar", str(write(tmp_path / "lr.json", json.dumps(edits))), "--json", server=project.url
    )
    assert asked.code == 0, asked.err
    assert json.loads(asked.out)["experiment_id"] is None  # asked, not submitted
    missing = [{"old": "LEARNING_RATE = 12345", "new": "x"}]
    refused = in_process(
        capsys, "similar", str(write(tmp_path / "no.json", json.dumps(missing))), server=project.url
    )
    assert (
        refused.code == 1 and "422 Edit not found" in refused.err and "LEARNING_RATE = 12345" in refused.err
    )


def test_search_finds_experiments_by_the_constant_they_set_and_their_words(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    with project.agent() as agent:
        tuned = agent.submit("tune the rate to 0.63", train_py=bigram(0.63))
    by_constant = in_process(capsys, "search", "--constant", "LEARNING_RATE", "--json", server=project.url)
    assert by_constant.code == 0, by_constant.err
    assert tuned.id in [item["id"] for item in json.loads(by_constant.out)["items"]]
    assert (
        in_process(capsys, "search", "--constant", "NO_SUCH_KNOB", server=project.url).out
        == "no experiments match\n"
    )
    by_words = in_process(capsys, "search", "--text", "rate to 0.63", server=project.url)
    assert f"{tuned.id}" in by_words.out and "tune the rate to 0.63" in by_words.out
    nothing = in_process(capsys, "search", server=project.url)
    assert nothing.code == 1 and "say what to look for: --constant, --line, --text" in nothing.err
    too_many = in_process(capsys, "search", "--text", "x", "-n", "0", server=project.url)
    assert too_many.code == 1 and "--limit must be between 1 and" in too_many.err
