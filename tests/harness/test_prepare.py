"""prepare: idempotent, resumable, deterministic, and a harness id that moves with what it covers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.config import HarnessSettings, load_settings
from harness.data.errors import DataError
from harness.data_layout import PreparedPaths, read_manifest
from harness.manifest import HARNESS_DIR, harness_source_sha256
from harness.prepare import prepare

Prepared = tuple[HarnessSettings, PreparedPaths]


def small_settings(data_dir: Path, **overrides: object) -> HarnessSettings:
    return load_settings(
        "test", data_source="builtin", data_dir=data_dir, corpus_max_bytes=400_000, **overrides
    )


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    settings = small_settings(tmp_path_factory.mktemp("fresh"))
    return settings, prepare(settings, progress=False)


VAL_FILES = ["inputs.npy", "target_bytes.npy", "targets.npy"]


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_layout_is_the_documented_one(fresh: Prepared) -> None:
    settings, paths = fresh
    assert paths.root == Path(settings.data_dir) / "prepared" / "builtin-v512"
    assert sorted(p.name for p in paths.train_dir.iterdir()) == ["docs.npy", "meta.json", "tokens.bin"]
    assert sorted(p.name for p in paths.val_dir.iterdir()) == VAL_FILES
    assert (paths.tokenizer_dir / "tokenizer.json").is_file()
    assert [p.name for p in (paths.raw_dir / "val").iterdir()] == ["shard_val.parquet"]
    manifest = read_manifest(settings)
    assert manifest["vocab_size"] == 512 and manifest["bos_id"] == 508
    offsets = np.load(paths.train_dir / "docs.npy")
    tokens = np.fromfile(paths.train_dir / "tokens.bin", dtype=np.uint16)
    assert offsets[-1] == len(tokens) == manifest["train_tokens"]
    assert (tokens[offsets[:-1]] == manifest["bos_id"]).all()  # every document starts with BOS


def test_second_run_changes_nothing(fresh: Prepared) -> None:
    settings, paths = fresh
    before = mtimes(paths.root)
    manifest = read_manifest(settings)
    prepare(settings, progress=False)
    assert mtimes(paths.root) == before
    assert read_manifest(settings) == manifest


def test_resumes_a_stage_that_did_not_finish(tmp_path: Path, fresh: Prepared) -> None:
    settings, paths = fresh
    copy = tmp_path / "prepared" / paths.root.name
    shutil.copytree(paths.root, copy)
    settings = small_settings(tmp_path)
    # As if prepare died while writing the training tokens: no marker, a half-written folder.
    (copy / ".stages" / "train.json").unlink()
    (copy / "train" / "tokens.bin").write_bytes(b"\0" * 10)
    tokenizer_mtime = (copy / "tokenizer" / "tokenizer.json").stat().st_mtime_ns
    prepare(settings, progress=False)
    assert (copy / "tokenizer" / "tokenizer.json").stat().st_mtime_ns == tokenizer_mtime  # not redone
    assert (copy / "train" / "tokens.bin").read_bytes() == (paths.train_dir / "tokens.bin").read_bytes()


def test_a_missing_raw_shard_is_rebuilt(tmp_path: Path, fresh: Prepared) -> None:
    _, paths = fresh
    copy = tmp_path / "prepared" / paths.root.name
    shutil.copytree(paths.root, copy)
    (copy / "raw" / "val" / "shard_val.parquet").unlink()
    prepare(small_settings(tmp_path), progress=False)
    assert (copy / "raw" / "val" / "shard_val.parquet").is_file()
    assert read_manifest(small_settings(tmp_path))["val_sha256"] == read_manifest(fresh[0])["val_sha256"]


def test_same_inputs_give_the_same_data_and_harness_id(tmp_path: Path, fresh: Prepared) -> None:
    settings, paths = fresh
    again = small_settings(tmp_path)
    other = prepare(again, progress=False)
    assert read_manifest(again)["harness_id"] == read_manifest(settings)["harness_id"]
    for name in ("train/tokens.bin", "val/inputs.npy", "tokenizer/tokenizer.json"):
        assert (other.root / name).read_bytes() == (paths.root / name).read_bytes()


def test_harness_id_covers_settings_and_source(tmp_path: Path, fresh: Prepared) -> None:
    settings, _ = fresh
    base = read_manifest(settings)["harness_id"]
    assert read_manifest(small_settings(settings.data_dir, time_budget=4.0))["harness_id"] != base
    # Each run has its own seed (ctx.seed): the same harness, whatever the default seed.
    assert read_manifest(small_settings(settings.data_dir, seed=7))["harness_id"] == base
    harness_copy = tmp_path / "harness"
    shutil.copytree(HARNESS_DIR, harness_copy)
    source = harness_source_sha256(harness_copy)
    (harness_copy / "baseline" / "train.py").write_text("# an agent's change is not harness code\n")
    assert harness_source_sha256(harness_copy) == source
    with open(harness_copy / "evaluate.py", "a") as handle:
        handle.write("\n# a change to the scorer\n")
    assert harness_source_sha256(harness_copy) != source


def test_reading_unprepared_data_says_how_to_prepare(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"run `autoresearch prepare --preset test --data-dir"):
        read_manifest(small_settings(tmp_path))


def test_reading_with_another_seq_len_says_to_prepare_again(fresh: Prepared) -> None:
    settings, _ = fresh
    with pytest.raises(DataError, match="SEQ_LEN=64, but the settings say 32"):
        read_manifest(small_settings(settings.data_dir, seq_len=32, eval_tokens=32 * 32))


@pytest.mark.parametrize(
    "damage",
    ["train/tokens.bin", "val/targets.npy", "tokenizer/tokenizer.json"],
)
def test_a_deleted_or_damaged_output_is_rebuilt(
    damage: str, tmp_path: Path, fresh: tuple[HarnessSettings, PreparedPaths]
) -> None:
    settings, paths = fresh
    copy = tmp_path / "prepared" / paths.root.name
    shutil.copytree(paths.root, copy)
    (copy / damage).write_bytes(b"damaged")
    prepare(small_settings(tmp_path), progress=False)
    assert (copy / damage).read_bytes() == (paths.root / damage).read_bytes()
    (copy / damage).unlink()
    prepare(small_settings(tmp_path), progress=False)
    assert (copy / damage).read_bytes() == (paths.root / damage).read_bytes()
    assert read_manifest(small_settings(tmp_path))["harness_id"] == read_manifest(settings)["harness_id"]
