"""Compile once per train.py (harness.runner.compile_cache): what a run's compile wrote before its
first data request is kept for the next runs of the same train.py only, and nothing else.

The copies alone, on real folders: regular files only, no link followed, FIFOs passed over, a size
cap. Then real sandboxed runs of a hostile train.py that writes into its cache before and after
its first batch, plants a link to a host file and a FIFO: the next run of the same file finds
only what was written before the first batch, and a run of another file finds nothing.
"""

from __future__ import annotations

import os
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


def test_copy_out_keeps_nothing_of_a_tree_too_deep_or_with_too_many_folders(tmp_path: Path) -> None:
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

    caches.keep(sealed("first"), "a")
    caches.keep(sealed("second"), "a")  # a run that sealed at the same time: the first one stays
    found = caches.find("a")
    assert found is not None and (found / "f").read_text() == "first"
    for number in range(1, compile_cache.KEPT):  # with "a", KEPT caches, used in this order
        caches.keep(sealed(str(number)), f"key{number}")
    for age, name in enumerate(["a", *(f"key{n}" for n in range(1, compile_cache.KEPT))]):
        os.utime(caches.root / name, (1000 + age, 1000 + age))
    assert caches.find("a") is not None  # the oldest, used now: the newest
    caches.keep(sealed("last"), "last")  # one too many: the least recently used goes
    left = {path.name for path in caches.root.iterdir()}
    assert len(left) == compile_cache.KEPT and {"last", "a"} <= left and "key1" not in left


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
    (kept,) = caches.iterdir()
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
    assert len(list(caches.iterdir())) == 2
