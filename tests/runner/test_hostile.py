"""Real hostile candidates, one per class: each is contained, gets the right status, and cannot
improve its own score or affect the next experiment."""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import harness
from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from harness.evaluate import evaluate_bpb
from harness.prepare import prepare
from protocol.result import INTEGRITY_CLASSES
from tests.proc_scan import processes_left
from tests.runner.candidates import FOLDER, compose

pytestmark = pytest.mark.heavy

HARNESS_DIR = Path(harness.__file__).resolve().parent
# A model that learned anything scores well under this; one that sees the targets scores ~0.
CHEAT_BPB = 1.0


def harness_digest() -> str:
    """The scoring code hostile candidates go after: evaluate.py and the runner package."""
    digest = hashlib.sha256()
    for path in [HARNESS_DIR / "evaluate.py", *sorted((HARNESS_DIR / "runner").glob("*.py"))]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def idle_model_bpb(settings: HarnessSettings, paths: PreparedPaths) -> float:
    """What the no_training candidate must score: its seeded, untrained weights."""
    torch.manual_seed(settings.seed)
    model = nn.Sequential(nn.Embedding(settings.vocab_size, settings.vocab_size))
    return evaluate_bpb(model, paths.val_dir, torch.device("cpu"), settings.eval_batch_rows)


def test_cannot_see_validation_data_repo_database_or_secrets(
    test_data, run_candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings, paths = test_data
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AUTORESEARCH_WORKER_TOKEN", secret)
    database = tmp_path / "server.db"
    database.write_text("rows")
    hidden = [
        paths.val_dir / "targets.npy",
        paths.val_dir / "inputs.npy",
        paths.manifest_path,
        paths.tokenizer_dir / "tokenizer.json",
        HARNESS_DIR.parent / "pyproject.toml",  # the repository around the harness package
        database,
    ]
    result = run_candidate(
        compose(tmp_path, "hostile/reads_val.py", paths=[str(p) for p in hidden], secret=secret)
    )
    assert result.status == "ok", result.log_tail
    assert "VISIBLE" not in result.log_tail
    assert all(f"HIDDEN {path}" in result.log_tail for path in hidden)
    assert "SECRETS []" in result.log_tail and secret not in result.log_tail
    assert result.val_bpb > CHEAT_BPB


def test_has_no_network(run_candidate, tmp_path: Path) -> None:
    """A real server on the host's loopback; the sandbox's own loopback is a different one."""
    connections: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            connections.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as probe:  # the server does work
            probe.sendall(b"probe")
        result = run_candidate(
            compose(tmp_path, "hostile/opens_socket.py", addresses=[("127.0.0.1", port)]), time_budget=1.0
        )
    finally:
        stop.set()
        thread.join()
        server.close()
    assert connections == [b"probe"]
    assert "CONNECTED" not in result.log_tail
    assert "BLOCKED train 127.0.0.1" in result.log_tail and "BLOCKED build_model 127.0.0.1" in result.log_tail
    assert result.status == "ok", result.log_tail


def test_cannot_write_outside_its_work_dir(run_candidate, tmp_path: Path) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    outside = tmp_path / "outside.txt"
    venv_config = Path(sys.prefix) / "pyvenv.cfg"
    protected = [HARNESS_DIR / "evaluate.py", venv_config]
    before = [path.read_bytes() for path in protected]
    targets = [*map(str, protected), str(outside), f"/tmp/{marker}"]
    result = run_candidate(compose(tmp_path, "hostile/writes_outside.py", targets=targets), time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert [path.read_bytes() for path in protected] == before
    assert not outside.exists() and not Path("/tmp", marker).exists()
    for path in [*map(str, protected), str(outside), "/sandbox/candidate/train.py"]:
        assert f"REFUSED {path}" in result.log_tail
    assert f"WROTE /tmp/{marker}" in result.log_tail  # its private /tmp, gone with the sandbox
    assert "WROTE inside work dir" in result.log_tail


def test_cannot_modify_the_harness_on_disk_or_in_the_scorer(run_candidate, tmp_path: Path) -> None:
    before = harness_digest()
    result = run_candidate(compose(tmp_path, "hostile/modifies_harness.py"), time_budget=1.0)
    assert harness_digest() == before
    assert "COULD NOT REWRITE" in result.log_tail and "REWROTE" not in result.log_tail
    assert result.status == "ok", result.log_tail
    assert result.val_bpb > CHEAT_BPB


def test_monkeypatched_loss_functions_do_not_reach_the_scorer(run_candidate, tmp_path: Path) -> None:
    result = run_candidate(compose(tmp_path, "hostile/monkeypatch_loss.py"), time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert result.val_bpb > CHEAT_BPB


def test_processes_left_running_die_with_the_sandbox(run_candidate, tmp_path: Path) -> None:
    marker = f"lingering-{uuid.uuid4().hex}"
    result = run_candidate(compose(tmp_path, "hostile/lingering_process.py", marker=marker), time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert processes_left(marker) == []


def test_fake_summary_and_forged_messages_do_not_set_the_score(
    test_data, run_candidate, tmp_path: Path
) -> None:
    result = run_candidate(compose(tmp_path, "hostile/fake_val_bpb.py"), time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert "val_bpb:          0.000001" in result.log_tail  # it did print its claim
    assert result.val_bpb > CHEAT_BPB
    # The machine's speed is the harness's reading, made before train.py was imported.
    assert result.conditions is not None and 0 < (result.conditions.speed_gflops or 0) < 10_000


@pytest.mark.parametrize("part", ["hostile/lookahead.py", "hostile/lookahead_memo.py"])
def test_looking_ahead_is_caught_by_the_causality_probe(run_candidate, tmp_path: Path, part: str) -> None:
    result = run_candidate(compose(tmp_path, part), time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "non_causal"), result.log_tail
    assert "non-causal model" in result.error_message
    assert result.val_bpb is None


def test_looking_ahead_only_where_it_pays_most_is_caught(run_candidate, tmp_path: Path) -> None:
    """A lookahead on the 3 % of positions where the model's own loss is highest (it scored 2.88
    against an honest 3.10 with a one-batch probe) is caught: the probe tests 288 positions on
    `test`, which miss a 3 % lookahead with probability about 0.97^288 (1.6e-4); test_probe_power.py
    has the probe's power at 1 %."""
    result = run_candidate(compose(tmp_path, "hostile/lookahead_worst.py", share=0.03), time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "non_causal"), result.log_tail
    assert result.val_bpb is None


def test_a_last_position_answered_from_a_cache_is_caught_by_a_whole_row(
    run_candidate, tmp_path: Path
) -> None:
    """No cut can look at a row's last position, and the model answers repeats from its first
    answer: only the probe's rows shown whole, in a fresh process, compare it."""
    result = run_candidate(compose(tmp_path, "hostile/last_position_cache.py"), time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "non_causal"), result.log_tail
    assert result.val_bpb is None


def carried_rows(val_dir: Path) -> list[list[int]]:
    inputs, targets = np.load(val_dir / "inputs.npy"), np.load(val_dir / "targets.npy")
    return np.concatenate([inputs, targets[:, -1:]], axis=1).tolist()


def test_rows_an_offline_prepare_gives_are_not_the_scored_ones(
    test_data, run_candidate, tmp_path: Path
) -> None:
    """Everything behind the rows is public (the corpus, the code, the tokenizer) but the
    installation's secret: a candidate that carries the rows prepare gives with another secret (here
    the same corpus slice and settings, prepared apart) and looks them up scores as an honest one."""
    settings, paths = test_data
    offline = prepare(settings.model_copy(update={"data_dir": tmp_path / "offline"}), progress=False)
    rows = carried_rows(offline.val_dir)
    scored = {tuple(row) for row in carried_rows(paths.val_dir)}
    assert sum(tuple(row) in scored for row in rows) == 0
    result = run_candidate(compose(tmp_path, "hostile/carries_val_rows.py", rows=rows), time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert result.val_bpb is not None and result.val_bpb > 2.0  # honest: 2.6-2.9; the scored rows: 0.04


def test_scored_text_the_model_knew_is_an_integrity_event(test_data, run_candidate, tmp_path: Path) -> None:
    """Were the scored rows ever to leak, the model that carries them scores its documents far below
    anything trained within the budget reaches: known_text, never scored."""
    _, paths = test_data
    train_py = compose(tmp_path, "hostile/carries_val_rows.py", rows=carried_rows(paths.val_dir))
    result = run_candidate(train_py, time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "known_text"), result.log_tail
    assert result.error_class in INTEGRITY_CLASSES and result.val_bpb is None
    assert "scored below 0.3 bits per byte" in result.error_message


def test_fork_bomb_is_contained_and_the_next_experiment_is_unaffected(
    test_data, run_candidate, tmp_path: Path
) -> None:
    settings, paths = test_data
    before = harness_digest()
    bomb = run_candidate(compose(tmp_path, "hostile/fork_bomb.py"), time_budget=1.0, compile_allowance=2.0)
    assert (bomb.status, bomb.error_class) == ("timeout", "timeout"), bomb.log_tail
    after = run_candidate(FOLDER / "no_training.py", time_budget=1.0)
    assert after.status == "ok", after.log_tail
    assert after.val_bpb == pytest.approx(idle_model_bpb(settings, paths), abs=1e-9)
    assert harness_digest() == before


def test_filling_the_work_folder_stops_at_its_cap_and_ends_out_of_disk(run_candidate, tmp_path: Path) -> None:
    # A 32 MiB cap and a candidate that writes 256 MiB in 1 MiB files: were the work folder a host
    # folder (as before), all 256 MiB would land on the host's disk and the run would be `ok`.
    result = run_candidate(compose(tmp_path, "hostile/fills_disk.py", megabytes=256), work_disk_gb=1 / 32)
    assert (result.status, result.error_class) == ("crash", "out_of_disk"), result.log_tail
    assert "/sandbox/work holds at most 0.03125 GB" in result.error_message
    assert "No space left on device" in result.error_message
    assert "WROTE" not in result.log_tail
