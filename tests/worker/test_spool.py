"""The result spool keeps every finished result until acknowledged, across crashes (real files)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.spool import Spool, new_entry

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 10**6)),
        st.tuples(st.just("ack"), st.integers(0, 50)),
        st.tuples(st.just("reject"), st.integers(0, 50)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("stale_tmp"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations)
def test_pending_is_exactly_what_was_put_and_not_yet_settled(tmp_path_factory, ops) -> None:
    root = tmp_path_factory.mktemp("spool")
    spool = Spool(root)
    model: dict[str, int] = {}  # result_id -> payload
    rejected: set[str] = set()
    put_order: list[str] = []
    for op, arg in ops:
        if op == "put":
            entry = new_entry(f"lease-{arg}", arg, {"status": "ok", "val_bpb": arg / 7})
            spool.put(entry)
            model[entry.result_id] = arg
            put_order.append(entry.result_id)
        elif op in ("ack", "reject") and put_order:
            result_id = put_order[arg % len(put_order)]
            if result_id in model:
                if op == "ack":
                    spool.acknowledge(result_id)
                else:
                    spool.reject(result_id, "refused for the test")
                    rejected.add(result_id)
                del model[result_id]
        elif op == "restart":
            spool = Spool(root)
            spool.clean_temporary()
        elif op == "stale_tmp":
            (spool.pending_dir / f".half-written.{os.getpid()}.tmp").write_text('{"result_id": ')
    pending = spool.pending()
    assert {e.result_id: e.experiment_id for e in pending} == model
    assert [e.result_id for e in pending] == [r for r in put_order if r in model]  # oldest first
    assert {p.stem for p in spool.rejected_dir.glob("*.json")} == rejected


def test_entry_round_trips_with_its_result(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    result = {"status": "ok", "val_bpb": 1.2345, "log_tail": "step 1\nstep 2 ünïcode"}
    entry = new_entry("lease-7", 42, result)
    spool.put(entry)
    (again,) = Spool(tmp_path).pending()
    assert again == entry


def test_corrupt_file_is_set_aside_with_reason_not_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    good = new_entry("lease-1", 1, {"status": "ok"})
    spool.put(good)
    bad = spool.pending_dir / "00000000-0000-0000-0000-000000000000.json"
    bad.write_text("{not json")
    assert [e.result_id for e in spool.pending()] == [good.result_id]
    kept = spool.rejected_dir / bad.name
    assert kept.read_text() == "{not json"
    assert "unreadable" in kept.with_suffix(".reason.txt").read_text()


WRITER = """
import sys
from pathlib import Path
from worker.spool import Spool, new_entry
spool = Spool(Path(sys.argv[1]))
i = 0
while True:
    spool.put(new_entry(f"lease-{i}", i, {"status": "ok", "log_tail": "x" * 200_000}))
    if i == 3:
        print("writing", flush=True)
    i += 1
"""


def test_sigkill_while_writing_leaves_only_whole_results(tmp_path: Path) -> None:
    """A real process is killed mid-stream: every file in the spool parses, none is lost."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    spool = Spool(tmp_path)
    entries = spool.pending()
    assert len(entries) >= 4
    assert sorted(e.experiment_id for e in entries) == list(range(len(entries)))
    assert not list(spool.rejected_dir.iterdir())
    for path in spool.pending_dir.glob("*.json"):
        assert json.loads(path.read_text())["result"]["log_tail"] == "x" * 200_000
    spool.clean_temporary()
    assert not list(spool.pending_dir.glob(".*"))
