"""The CUDA IPC hand-over, as far as a machine without a GPU can show it.

What needs a GPU (opening the model's buffer, the copy on the device) runs in the GPU check
(bench/gpu_check.sh, step 1's baseline is scored through it). Here: which hand-over each device
gets, the checks the scorer applies to the export a model process sends (it comes from a process
that runs candidate code), the bound on what the scorer reads, and, in real bubblewrap sandboxes,
the shared /dev/shm the IPC needs: the scorer's own namespace shows the run's folder and nothing
else of the host's, a model sandbox built by the runner's own spec shares it, and what the eval
process leaves there is gone before the probe process starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.runner.cuda_handover import (
    MARKER,
    Export,
    ExportError,
    Handover,
    RunShm,
    check_run_shm,
    handover_for,
    parse_export,
    within,
)
from harness.runner.handover_check import HandoverCheckError, check
from harness.runner.limits import default_limits
from harness.runner.scoring.model_process import SCORER_SHM, ModelJob, model_spec

# The export of a [64, 2048, 8192] float32 buffer on an H200 (../shared/gpu/, the sandbox probe):
# torch's handle, its reference-counter name and event handle, as the model process sends them.
H200_EXPORT: dict[str, object] = {
    "device": 0,
    "handle": "0263f05e6630000000005002000000000000000000000100000000001000000000000600000000ff"
    "000032000000000000003300d0c19600005c0000000000000000",
    "size_bytes": 64 * 2048 * 8192 * 4,
    "offset_bytes": 0,
    "ref_counter": b"/torch_592_1931041985_0".hex(),
    "ref_counter_offset": 0,
    "event": "50020000000000000100000000000000ff0f" + "00" * 46,
    "event_sync": True,
}
NEEDED = 64 * 2048 * 8192 * 4


def test_cuda_devices_get_ipc_and_nothing_else_falls_back() -> None:
    assert handover_for("cuda") is Handover.CUDA_IPC
    assert handover_for("cuda:3") is Handover.CUDA_IPC
    assert handover_for("cpu") is Handover.HOST


def test_an_honest_export_parses_to_its_own_fields() -> None:
    found = parse_export(H200_EXPORT, device=0, needed_bytes=NEEDED)
    assert found == Export(
        device=0,
        handle=bytes.fromhex(str(H200_EXPORT["handle"])),
        size_bytes=NEEDED,
        offset_bytes=0,
        ref_counter=b"/torch_592_1931041985_0",
        ref_counter_offset=0,
        event=bytes.fromhex(str(H200_EXPORT["event"])),
        event_sync=True,
    )


def test_an_export_without_an_event_to_wait_on_parses() -> None:
    found = parse_export({**H200_EXPORT, "event": "", "event_sync": False}, 0, NEEDED)
    assert found.event == b"" and not found.event_sync


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("size_bytes", NEEDED - 4, "size_bytes"),  # smaller than what the scorer will read
        ("size_bytes", True, "size_bytes"),  # a bool is not a size
        ("size_bytes", float(NEEDED), "size_bytes"),
        ("offset_bytes", -1, "offset_bytes"),
        ("offset_bytes", 1 << 60, "offset_bytes"),
        ("ref_counter_offset", 10_000, "ref_counter_offset"),  # past torch's counter file
        ("ref_counter", b"/../../etc/passwd".hex(), "ref_counter"),  # a path, not a counter name
        ("ref_counter", b"/torch_1_2_3/x".hex(), "ref_counter"),
        ("handle", "zz", "handle"),
        ("handle", "", "handle"),
        ("handle", "00" * 5000, "handle"),
        ("event_sync", 1, "event_sync"),
        ("event", "", "event"),  # a sync with no event to wait on
        ("device", 1, "device 1"),  # not the scorer's GPU
    ],
)
def test_a_forged_field_is_refused_by_name(field: str, value: object, says: str) -> None:
    with pytest.raises(ExportError, match=says):
        parse_export({**H200_EXPORT, field: value}, device=0, needed_bytes=NEEDED)


def test_a_missing_export_is_refused() -> None:
    with pytest.raises(ExportError, match="missing"):
        parse_export(None, device=0, needed_bytes=NEEDED)
    with pytest.raises(ExportError, match="event_sync"):
        parse_export({k: v for k, v in H200_EXPORT.items() if k != "event_sync"}, 0, NEEDED)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@given(st.dictionaries(st.sampled_from(sorted(H200_EXPORT)), json_values, max_size=8))
def test_any_message_is_either_a_checked_export_or_an_export_error(changes: dict[str, object]) -> None:
    """Whatever a hostile model sends in place of fields, the scorer gets ExportError or an
    export whose every field is in range (never another exception, never a field unchecked)."""
    try:
        found = parse_export({**H200_EXPORT, **changes}, device=0, needed_bytes=NEEDED)
    except ExportError:
        return
    assert found.device == 0 and found.size_bytes >= NEEDED and 0 <= found.offset_bytes < 1 << 48
    assert 0 <= found.ref_counter_offset < 10_000 and found.ref_counter.startswith(b"/torch_")
    assert b"/" not in found.ref_counter[1:] and isinstance(found.event_sync, bool)
    assert 0 < len(found.handle) <= 1024 and len(found.event) <= 1024
    assert found.event or not found.event_sync  # a sync needs an event to wait on


@given(base=st.integers(0, 64), size=st.integers(0, 64), start=st.integers(0, 128), length=st.integers(1, 64))
def test_what_the_scorer_reads_must_lie_inside_the_mapped_allocation(
    base: int, size: int, start: int, length: int
) -> None:
    """Against the bytes themselves: every byte read is a byte of the allocation (a forged size or
    offset that reaches past it, or before it, is refused)."""
    read, mapped = set(range(start, start + length)), set(range(base, base + size))
    assert within(base, size, start, length) == (read <= mapped)


def in_scorer_namespace(shm: RunShm, script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` as the scorer runs: python in the run folder's namespace (RunShm.wrap)."""
    command = shm.wrap([sys.executable, "-c", textwrap.dedent(script)])
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_the_scorer_namespace_shows_the_run_folder_as_dev_shm_and_nothing_else_of_the_host() -> None:
    canary = Path("/dev/shm") / f"autoresearch-test-canary-{uuid.uuid4().hex}"
    canary.write_text("host secret")
    shm = RunShm.create()
    try:
        done = in_scorer_namespace(
            shm,
            """
            import os
            from harness.runner.cuda_handover import check_run_shm
            check_run_shm()
            open("/dev/shm/written-inside", "w").write("x")
            print(sorted(os.listdir("/dev/shm")))
            """,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(sorted([MARKER, "written-inside"]))
        assert (shm.folder / "written-inside").read_text() == "x"
    finally:
        shm.remove()
        canary.unlink()
    assert not shm.folder.exists()


def test_a_scorer_outside_its_namespace_refuses_to_use_dev_shm(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not this run's folder"):
        check_run_shm(tmp_path)


def test_model_sandboxes_share_the_scorer_dev_shm_and_the_probe_finds_nothing_the_eval_left(
    tmp_path: Path,
) -> None:
    """Two real model sandboxes from the runner's own spec (harness.runner.scoring.model_process), started
    in the scorer's namespace: the first writes files and folders into /dev/shm; the scorer sees
    them, empties the folder as it does between the eval and the probe, and the second sandbox
    finds it empty."""
    weights = tmp_path / "weights"
    weights.mkdir()
    candidate = tmp_path / "train.py"
    candidate.write_text("")
    shm = RunShm.create()
    try:
        done = in_scorer_namespace(
            shm,
            f"""
            import os, subprocess
            from pathlib import Path
            from harness.runner.cuda_handover import Handover, check_run_shm, empty_run_shm
            from harness.runner.limits import default_limits
            from harness.runner.scoring.model_process import ModelJob, model_spec
            from harness.runner.sandbox import bwrap_argv
            check_run_shm()
            job = ModelJob(
                candidate=Path({str(candidate)!r}), weights_dir=Path({str(weights)!r}), device="cpu",
                vocab_size=8, seq_len=4, time_budget=1.0, seed=0, bos_id=0, max_rows=1,
                sandboxed=True, limits=default_limits(1.0, "shm-test"), handover=Handover.HOST,
                shared_shm=True,
            )
            def inside(script):
                argv = bwrap_argv(model_spec(job), ["sh", "-c", script])
                return subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            inside("echo eval > /dev/shm/torch_1_2_3; mkdir -p /dev/shm/d/e; echo x > /dev/shm/d/e/f")
            print("scorer sees", sorted(os.listdir("/dev/shm")))
            empty_run_shm()
            print("probe sees", inside("ls -A /dev/shm | tr '\\\\n' ' '").split())
            """,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == f"scorer sees {sorted([MARKER, 'd', 'torch_1_2_3'])}"
        assert lines[1] == "probe sees []"
    finally:
        shm.remove()


def test_on_cpu_a_model_sandbox_keeps_a_private_dev_shm(tmp_path: Path) -> None:
    job = ModelJob(
        candidate=tmp_path / "train.py",
        weights_dir=tmp_path,
        device="cpu",
        vocab_size=8,
        seq_len=4,
        time_budget=1.0,
        seed=0,
        bos_id=0,
        max_rows=1,
        sandboxed=True,
        limits=default_limits(1.0, "shm-test"),
        handover=handover_for("cpu"),
    )
    assert all(bind.host != SCORER_SHM for bind in model_spec(job).binds)


def test_the_preflight_check_says_which_part_fails_on_a_machine_without_cuda_ipc() -> None:
    """The worker's CUDA preflight (harness.runner.handover_check) run here, where torch has no
    CUDA: the scorer's namespace, the model sandbox from the runner's spec and the export all
    start for real, and the failure names the model sandbox; no run folder is left behind."""
    before = set(Path("/dev/shm").glob("autoresearch-run-*"))
    with pytest.raises(HandoverCheckError, match=r"CUDA IPC check: the model sandbox: .*CUDA"):
        check("cuda")
    assert set(Path("/dev/shm").glob("autoresearch-run-*")) <= before


NOBODY = 65534


def test_what_the_eval_locked_in_dev_shm_is_removed_too() -> None:
    """A model that leaves folders locked (mode 000) and nested, to carry state to the probe: the
    scorer, as the same unprivileged user (as root the lock would not hold), opens and removes
    them and reports nothing left. Run with setpriv as nobody: a model sandbox has no root."""
    shm = Path(tempfile.mkdtemp(prefix="autoresearch-test-shm-"))  # outside pytest's root-only folder
    os.chown(shm, NOBODY, NOBODY)
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from harness.runner.cuda_handover import empty_run_shm
        shm = Path(sys.argv[1])
        deep = shm / "locked" / Path(*["d"] * 300)
        deep.mkdir(parents=True)
        (deep / "state").write_text("learned")
        (shm / "torch_1_2_3").write_text("counter")
        os.chmod(deep, 0)
        os.chmod(shm / "locked", 0)
        print(empty_run_shm(shm), sorted(os.listdir(shm)))
        """
    )
    as_nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    try:
        done = subprocess.run(
            [*as_nobody, sys.executable, "-c", script, str(shm)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[] []"
    finally:
        shutil.rmtree(shm, ignore_errors=True)
