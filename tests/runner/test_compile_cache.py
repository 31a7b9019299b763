"""Compile once per train.py (harness.runner.compile_cache): what a run's compile wrote before its
first data request is kept for the next runs of the same train.py only, and nothing else.

The copies alone, on real folders: regular files only, no link followed, FIFOs passed over, a size
cap. Then real sandboxed runs of a hostile train.py that writes into its cache before and after
its first batch, plants a link to a host file and a FIFO: the next run of the same file finds
only what was written before the first batch, and a run of another file finds nothing.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.runner import compile_cache
from harness.runner.compile_cache import CompileCaches, cache_key, copy_in, copy_out
from tests.runner.conftest import RunCandidate


def open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def test_copy_out_takes_regular_files_and_follows_no_link(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("validation text")
    cache = tmp_path / "cache"
    (cache / "inductor" / "fx").mkdir(parents=True)
    (cache / "inductor" / "fx" / "graph.py").write_text("compiled")
    (cache / "triton").mkdir()
    (cache / "triton" / "kernel.bin").write_bytes(b"\x00\x01" * 1000)
    (cache / "link-to-file").symlink_to(secret)
    (cache / "link-to-dir").symlink_to(tmp_path)
    (cache / "inductor" / "link-up").symlink_to("../../host-secret.txt")
    os.mkfifo(cache / "fifo")  # opening it to read would block: it is passed over
    folder = open_dir(cache)
    try:
        assert copy_out(folder, tmp_path / "sealed")
    finally:
        os.close(folder)
    sealed = tmp_path / "sealed"
    assert tree(sealed) == {"inductor/fx/graph.py": b"compiled", "triton/kernel.bin": b"\x00\x01" * 1000}
    assert not any(path.is_symlink() for path in sealed.rglob("*"))
    assert "validation text" not in "".join(
        p.read_text(errors="replace") for p in sealed.rglob("*") if p.is_file()
    )


def test_copy_out_keeps_nothing_past_its_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "big").write_bytes(b"x" * 5000)
    folder = open_dir(cache)
    try:
        monkeypatch.setattr(compile_cache, "MAX_BYTES", 4096)
        assert not copy_out(folder, tmp_path / "sealed") and not (tmp_path / "sealed").exists()
        monkeypatch.setattr(compile_cache, "MAX_BYTES", 1 << 20)
        monkeypatch.setattr(compile_cache, "MAX_FILES", 0)
        assert not copy_out(folder, tmp_path / "sealed") and not (tmp_path / "sealed").exists()
        monkeypatch.setattr(compile_cache, "MAX_FILES", 1)
        assert copy_out(folder, tmp_path / "sealed") and tree(tmp_path / "sealed") == {"big": b"x" * 5000}
    finally:
        os.close(folder)


def test_copy_out_keeps_nothing_of_a_tree_too_deep_or_with_too_many_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compile_cache, "MAX_FILES", 50)  # the rule, without making 20,001 folders
    deep = tmp_path / "deep"
    (deep / Path(*["d"] * (compile_cache.MAX_DEPTH + 1))).mkdir(parents=True)  # one level too many
    wide = tmp_path / "wide"
    for number in range(compile_cache.MAX_FILES + 1):  # empty folders count too
        (wide / str(number)).mkdir(parents=True)
    fits = tmp_path / "fits"
    (fits / Path(*["d"] * compile_cache.MAX_DEPTH)).mkdir(parents=True)
    (fits / Path(*["d"] * compile_cache.MAX_DEPTH) / "f").write_text("at the deepest level allowed")
    for name, expected in (("deep", False), ("wide", False), ("fits", True)):
        folder = open_dir(tmp_path / name)
        try:
            assert copy_out(folder, tmp_path / f"sealed-{name}") is expected, name
        finally:
            os.close(folder)
        assert (tmp_path / f"sealed-{name}").exists() is expected


def test_copy_in_restores_into_a_fresh_folder(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    (kept / "inductor" / "aot").mkdir(parents=True)
    (kept / "inductor" / "aot" / "entry").write_text("a")
    (kept / "triton").mkdir()
    (kept / "triton" / "k").write_text("b")
    fresh = tmp_path / "fresh"
    for sub in compile_cache.FOLDERS.values():  # what the train entry made before `ready`
        (fresh / sub).mkdir(parents=True)
    folder = open_dir(fresh)
    try:
        copy_in(kept, folder)
    finally:
        os.close(folder)
    assert tree(fresh) == tree(kept) == {"inductor/aot/entry": b"a", "triton/k": b"b"}


def test_the_first_kept_cache_of_a_key_stays_and_old_ones_go(tmp_path: Path) -> None:
    caches = CompileCaches(tmp_path / "caches")
    assert caches.find("a") is None

    def sealed(text: str) -> Path:
        folder = tmp_path / f"sealed-{text}"
        folder.mkdir()
        (folder / "f").write_text(text)
        return folder

    caches.keep(sealed("first"), "a", 3.5)
    caches.keep(sealed("second"), "a", 1.0)  # a run that sealed at the same time: the first one stays
    found = caches.find("a")
    assert found is not None and (found[0] / "f").read_text() == "first" and found[1] == 3.5
    for number in range(1, compile_cache.KEPT):  # with "a", KEPT caches, used in this order
        caches.keep(sealed(str(number)), f"key{number}", 1.0)
    for age, name in enumerate(["a", *(f"key{n}" for n in range(1, compile_cache.KEPT))]):
        os.utime(caches.root / name, (1000 + age, 1000 + age))
    assert caches.find("a") is not None  # the oldest, used now: the newest
    caches.keep(sealed("last"), "last", 1.0)  # one too many: the least recently used goes
    left = {path.name for path in caches.root.iterdir() if not path.name.startswith(".")}
    assert len(left) == compile_cache.KEPT and {"last", "a"} <= left and "key1" not in left
    assert not (caches.root / ".key1.sealed-after").exists()


def test_a_run_restoring_a_cache_is_credited_what_its_sealing_run_left_of_the_allowance() -> None:
    restored = compile_cache.CacheUse(restore=Path("kept"), seal_into=None, sealed_after=7.5)
    assert compile_cache.allowance_after(10.0, restored) == 2.5
    assert compile_cache.allowance_after(10.0, replace(restored, sealed_after=12.0)) == 0.0
    sealing = compile_cache.CacheUse(restore=None, seal_into=Path("new"))
    assert compile_cache.allowance_after(10.0, sealing) == compile_cache.allowance_after(10.0, None) == 10.0


def test_keys_differ_by_file_and_harness() -> None:
    assert cache_key(b"x = 1\n", "h") == cache_key(b"x = 1\n", "h")
    assert len({cache_key(b"x = 1\n", "h"), cache_key(b"x = 2\n", "h"), cache_key(b"x = 1\n", "g")}) == 3


# A candidate that writes into torch.compile's cache folder before its first batch (what a compile
# would leave) and after it (what training learned), plants a link to a host file and a FIFO, and
# prints what it found there when it started.
HOSTILE = """
import os
import torch
from torch import nn

CACHE = os.environ["TORCHINDUCTOR_CACHE_DIR"]
found = sorted(
    os.path.relpath(os.path.join(folder, name), CACHE)
    for folder, _, names in os.walk(CACHE)
    for name in names
)
print("FOUND", found, flush=True)
for name in found:
    print("CONTENT", name, open(os.path.join(CACHE, name)).read()[:40], flush=True)


def build_model(ctx):
    os.makedirs(CACHE, exist_ok=True)  # scored, the model's process has no such folder
    with open(os.path.join(CACHE, "before-data.txt"), "w") as handle:
        handle.write("written at startup by VARIANT")
    os.symlink(HOST_FILE, os.path.join(CACHE, "host-link"))
    os.mkfifo(os.path.join(CACHE, "fifo"))
    return nn.Embedding(ctx.vocab_size, ctx.vocab_size)


def train(model, ctx):
    batches = ctx.loader(4)
    inputs, targets = next(batches)
    with open(os.path.join(CACHE, "after-data.txt"), "w") as handle:
        handle.write("learned " + str(inputs.sum().item()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.step()
    ctx.log(step=0, loss=loss.item())
"""


def found_line(log: str) -> str:
    return next(line for line in log.splitlines() if line.startswith("FOUND"))


def test_a_run_gets_only_what_its_own_train_py_wrote_before_its_first_batch(
    run_candidate: RunCandidate, settings: HarnessSettings, tmp_path: Path
) -> None:
    host_file = tmp_path / "host-file.txt"
    host_file.write_text("host secret")
    caches = tmp_path / "caches"

    def candidate(variant: str) -> Path:
        path = tmp_path / f"{variant}.py"
        path.write_text(HOSTILE.replace("VARIANT", variant).replace("HOST_FILE", repr(str(host_file))))
        return path

    first = run_candidate(candidate("one"), compile_cache=caches)
    assert first.status == "ok", first.log_tail
    assert found_line(first.log_tail) == "FOUND []"
    (kept,) = (path for path in caches.iterdir() if not path.name.startswith("."))
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "inductor/before-data.txt"
    ]

    second = run_candidate(candidate("one"), compile_cache=caches)  # the same train.py again
    assert second.status == "ok", second.log_tail
    assert found_line(second.log_tail) == "FOUND ['before-data.txt']"
    assert "CONTENT before-data.txt written at startup by one" in second.log_tail
    assert "learned" not in second.log_tail and "host secret" not in second.log_tail

    other = run_candidate(candidate("two"), compile_cache=caches)  # another train.py
    assert other.status == "ok", other.log_tail
    assert found_line(other.log_tail) == "FOUND []"
    assert len([path for path in caches.iterdir() if not path.name.startswith(".")]) == 2


# A candidate that computes before its first data request for as long as it is credited (ctx.time_left()
# stays at the budget until startup's credit is spent), adds it to what it found in its compile cache
# and saves the sum there: hidden state that would grow by an allowance with every run of it.
ACCUMULATES = """
import os
import time
import torch
from torch import nn

STATE = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "state.txt")


def build_model(ctx):
    carried = float(open(STATE).read()) if os.path.exists(STATE) else 0.0
    started = time.process_time()
    while ctx.time_left() >= ctx.time_budget:  # credited startup: the clock has not started
        sum(range(10_000))
    total = carried + time.process_time() - started
    print(f"PRE-DATA CPU {total:.3f}", flush=True)
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    with open(STATE, "w") as handle:
        handle.write(repr(total))
    return nn.Embedding(ctx.vocab_size, ctx.vocab_size)


def train(model, ctx):
    inputs, targets = next(ctx.loader(4))
    ctx.log(step=0, loss=nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).item())
"""


def pre_data_cpu(log: str) -> float:
    return float(next(line for line in log.splitlines() if line.startswith("PRE-DATA CPU")).split()[-1])


def test_state_saved_into_the_cache_gains_no_more_in_a_third_run_than_in_the_first(
    run_candidate: RunCandidate, tmp_path: Path
) -> None:
    """Each run's computation before data, its own and what it restored, stays within one
    allowance: the first run's is all a third run has (the cache is sealed once, and a run that
    restores it is credited only what the sealing run left)."""
    train_py = tmp_path / "train.py"
    train_py.write_text(ACCUMULATES)
    caches = tmp_path / "caches"
    totals = []
    for _ in range(3):
        result = run_candidate(train_py, compile_cache=caches, compile_allowance=2.0)
        assert result.status == "ok", result.log_tail
        totals.append(pre_data_cpu(result.log_tail))
    first, _, third = totals
    assert first > 0.5, totals  # it did compute before its data
    assert third <= first + 0.3, totals
