"""`autoresearch similar` and what `autoresearch submit` says was tried before, against the kit's
real server and worker (`test` preset). Learning rates near 0.6 keep these apart from the other
kit tests' changes (0.019-0.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.candidates import bigram
from testkit.processes import Project
from tests.kit.cli_process import cli, in_process, write


def test_similar_before_submitting_and_for_an_experiment_and_what_submit_prints(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with project.agent() as agent:
        tried = agent.submit("lr 0.6", train_py=bigram(0.6))
    nearby = write(tmp_path / "train.py", bigram(0.61))
    asked = in_process(capsys, "similar", str(nearby), server=project.url)
    assert asked.code == 0, asked.err
    assert asked.out.startswith("1 similar experiment(s), most alike first:\n")
    assert (
        f"  #{tried.id} " in asked.out
        and "nearby_constants, LEARNING_RATE 0.6 (here 0.61) - lr 0.6" in asked.out
    )
    as_json = in_process(capsys, "similar", str(nearby), "--json", server=project.url)
    assert [s["experiment_id"] for s in json.loads(as_json.out)["similar"]] == [tried.id]
    empty = cli("similar", "-", stdin="", server=project.url)
    assert empty.returncode == 1 and "autoresearch similar: standard input is empty" in empty.stderr
    untried = in_process(capsys, "similar", str(write(tmp_path / "far.py", bigram(0.95))), server=project.url)
    assert untried.out == "not tried: no experiment made this change or a nearly identical one\n"

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
