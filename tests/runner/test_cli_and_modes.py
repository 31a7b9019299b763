"""`autoresearch run`, the refusal to run without a sandbox, the unsafe mode, and cancelling."""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest

from cli.main import main
from harness.data.errors import DataError
from harness.data_layout import read_manifest
from harness.runner import RunRequest, run_experiment, sandbox
from protocol.result import ProgressEvent
from tests.fixtures_data import CACHE_DIR
from tests.runner.candidates import GOOD, compose
from tests.runner.conftest import STARTUP_ROOM_S


@pytest.fixture(autouse=True)
def startup_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads settings from the environment: give startup room on a busy machine."""
    monkeypatch.setenv("COMPILE_ALLOWANCE", str(STARTUP_ROOM_S))


def cli(*args: str) -> list[str]:
    return ["run", *args, "--preset", "test", "--data-dir", str(CACHE_DIR)]


def test_cli_summary_block_is_the_harness_s_own(test_data, tmp_path: Path, capsys) -> None:
    """The candidate prints a fake summary; stdout holds only the harness's, with the real score."""
    code = main(cli(str(compose(tmp_path, "hostile/fake_val_bpb.py"))))
    out = capsys.readouterr()
    assert code == 0, out
    lines = out.out.splitlines()
    claimed = [line for line in lines if line.startswith("val_bpb:")]
    assert len(claimed) == 1 and float(claimed[0].split()[1]) > 1.0
    for key in ("training_seconds:", "total_seconds:", "peak_vram_mb:", "num_steps:", "num_params_M:"):
        assert any(line.startswith(key) for line in lines), key
    assert "status:           ok" in lines and "sandbox:          on" in lines
    # Live progress went to stderr, not stdout. The first event is always shown, but its phase
    # depends on timing: a warm sandbox can ask for its first batch before the first report, so
    # it may already say train (and later phases are paced to once a second).
    progress = re.compile(r"^\[\s*\d+\.\ds\] (startup|train|score)\b", re.MULTILINE)
    assert progress.search(out.err), out.err
    assert not any(progress.match(line) for line in lines)


def test_cli_json_record(test_data, capsys) -> None:
    code = main(cli(str(GOOD), "--json"))
    record = json.loads(capsys.readouterr().out)
    assert code == 0
    assert record["status"] == "ok" and record["val_bpb"] > 0 and record["sandbox"] is True
    ran_with = test_data[0].model_copy(update={"compile_allowance": STARTUP_ROOM_S})
    assert record["harness_id"] == read_manifest(ran_with)["harness_id"]


def test_cli_missing_file_is_a_usage_error(test_data, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope" / "train.py"
    assert main(cli(str(missing))) == 2
    assert f"{missing}: no such file" in capsys.readouterr().err


def test_without_bubblewrap_candidates_are_refused(
    test_data, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    sandbox.check_bwrap.cache_clear()
    try:
        assert main(cli(str(GOOD))) == 2
    finally:
        sandbox.check_bwrap.cache_clear()
    err = capsys.readouterr().err
    assert "bubblewrap (bwrap) is not installed" in err and "--unsafe-no-sandbox" in err


def test_unsafe_mode_runs_unconfined_and_says_so(run_candidate, tmp_path: Path) -> None:
    """The same candidate that the sandbox cuts off reaches a host server without it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    port = server.getsockname()[1]
    received: list[bytes] = []
    thread = threading.Thread(target=lambda: received.append(server.accept()[0].recv(100)), daemon=True)
    thread.start()
    try:
        candidate = compose(tmp_path, "hostile/opens_socket.py", addresses=[("127.0.0.1", port)])
        result = run_candidate(candidate, unsafe_no_sandbox=True)
        thread.join(timeout=5)
    finally:
        server.close()
    assert result.sandbox is False
    assert "NO SANDBOX (--unsafe-no-sandbox)" in result.log_tail
    assert "CONNECTED" in result.log_tail and received and received[0].startswith(b"leak from")


def test_cancel_stops_the_run_at_once(run_candidate, tmp_path: Path) -> None:
    cancel = threading.Event()

    def on_progress(event: ProgressEvent) -> None:
        if event.phase == "train":
            cancel.set()

    result = run_candidate(
        compose(tmp_path, "hostile/sleeps_forever.py"), on_progress=on_progress, cancel=cancel
    )
    assert (result.status, result.error_class) == ("crash", "cancelled"), result.log_tail
    assert result.training_seconds < 3.0  # the candidate would sleep until the deadline


def test_missing_validation_data_is_an_error_before_anything_runs(test_data, tmp_path: Path) -> None:
    settings, paths = test_data
    copy = tmp_path / "data"
    shutil.copytree(paths.root, copy / "prepared" / paths.root.name)
    (copy / "prepared" / paths.root.name / "val" / "targets.npy").unlink()
    work_root = tmp_path / "runs"
    work_root.mkdir()
    with pytest.raises(DataError, match=re.escape("targets.npy: missing; run `autoresearch prepare`")):
        run_experiment(RunRequest(GOOD, settings.model_copy(update={"data_dir": copy}), work_root=work_root))
    assert list(work_root.iterdir()) == []
