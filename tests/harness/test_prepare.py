"""prepare: idempotent, resumable, deterministic for one secret, and a harness id that moves with
what it covers; the validation sample: a secret's draw from the held-out pool."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.config import HarnessSettings, load_settings
from harness.data.errors import DataError
from harness.data.shards import iter_texts
from harness.data_layout import PreparedPaths, prepared_paths, read_manifest
from harness.manifest import HARNESS_DIR, RESULT_FORMAT, harness_source_sha256
from harness.prepare import prepare
from harness.tokenizer import load_tokenizer

Prepared = tuple[HarnessSettings, PreparedPaths]


SECRET = "the secret of these tests' installations"


def small_settings(data_dir: Path, **overrides: object) -> HarnessSettings:
    values = {"data_secret": SECRET, **overrides}
    return load_settings(
        "test", data_source="speeches", data_dir=data_dir, corpus_max_bytes=400_000, **values
    )


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    settings = small_settings(tmp_path_factory.mktemp("fresh"))
    return settings, prepare(settings, progress=False)


VAL_FILES = ["inputs.npy", "target_bytes.npy", "target_docs.npy", "targets.npy"]


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_layout_is_the_documented_one(fresh: Prepared) -> None:
    settings, paths = fresh
    assert paths.root == Path(settings.data_dir) / "prepared" / "speeches-v512"
    assert sorted(p.name for p in paths.train_dir.iterdir()) == ["docs.npy", "meta.json", "tokens.bin"]
    assert sorted(p.name for p in paths.val_dir.iterdir()) == VAL_FILES
    assert (paths.tokenizer_dir / "tokenizer.json").is_file()
    assert [p.name for p in (paths.raw_dir / "val").iterdir()] == ["pool.parquet"]
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
    (copy / "raw" / "val" / "pool.parquet").unlink()
    prepare(small_settings(tmp_path), progress=False)
    assert (copy / "raw" / "val" / "pool.parquet").is_file()
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
    harness_copy, result_copy = tmp_path / "harness", tmp_path / "result.py"
    shutil.copytree(HARNESS_DIR, harness_copy)
    shutil.copy(RESULT_FORMAT, result_copy)
    source = harness_source_sha256(harness_copy, result_copy)
    assert source == harness_source_sha256()
    (harness_copy / "baseline" / "train.py").write_text("# an agent's change is not harness code\n")
    assert harness_source_sha256(harness_copy, result_copy) == source
    with open(result_copy, "a") as handle:
        handle.write("\n# a change to what a result says\n")
    changed = harness_source_sha256(harness_copy, result_copy)
    assert changed != source
    with open(harness_copy / "evaluate.py", "a") as handle:
        handle.write("\n# a change to the scorer\n")
    assert harness_source_sha256(harness_copy, result_copy) not in (source, changed)


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


def pool_pieces(paths: PreparedPaths, seq_len: int) -> set[bytes]:
    """Every row-sized piece of every pool document, as bytes of its tokens after a BOS."""
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    found: set[bytes] = set()
    for text in iter_texts(sorted((paths.raw_dir / "val").glob("*.parquet"))):
        ids = np.asarray(tokenizer.encode_batch([text])[0], dtype=np.int64)
        found.update(ids[start : start + seq_len].tobytes() for start in range(0, len(ids), seq_len))
    return found


def test_the_sample_is_drawn_from_the_pool_by_the_secret(tmp_path: Path, fresh: Prepared) -> None:
    """Every row is pieces of held-out documents (a BOS, then up to a row of one document's
    tokens); another secret draws other pieces, so another harness id; the same secret, the same."""
    settings, paths = fresh
    rows = np.load(paths.val_dir / "inputs.npy")
    targets = np.load(paths.val_dir / "targets.npy")
    whole = np.concatenate([rows, targets[:, -1:]], axis=1)
    bos = read_manifest(settings)["bos_id"]
    pieces = pool_pieces(paths, settings.seq_len)
    for row in whole:
        starts = [*np.flatnonzero(row == bos).tolist(), len(row)]
        for start, end in itertools.pairwise(starts):
            assert row[start + 1 : end].astype(np.int64).tobytes() in pieces or end == len(row)
    other = small_settings(tmp_path, data_secret="another installation")
    prepare(other, progress=False)
    assert not np.array_equal(np.load(prepared_paths(other).val_dir / "inputs.npy"), rows)
    assert read_manifest(other)["harness_id"] != read_manifest(settings)["harness_id"]
    docs = np.load(paths.val_dir / "target_docs.npy")
    assert docs.shape == targets.shape and len(np.unique(docs)) > 1


def test_without_a_secret_one_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    settings = small_settings(tmp_path, data_secret=None)
    prepare(settings, progress=False)
    secret = tmp_path / "validation.secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_text().strip()) == 64
    written = secret.read_text()
    prepare(small_settings(tmp_path, data_secret=None, time_budget=4.0), progress=False)
    assert secret.read_text() == written  # kept: the same sample at every prepare
    stored = "".join(path.read_text() for path in tmp_path.rglob("*.json"))
    assert written.strip() not in stored  # the records name it by a digest only


def test_pinned_takes_the_pool_documents_whole_in_their_order(tmp_path: Path) -> None:
    """autoresearch's own evaluation (VALIDATION_SAMPLE=pinned): the pool's documents packed whole
    (cropped at a row's end) as they come, the same for every installation whatever its secret:
    every row opens with a document's first tokens."""
    pinned = [small_settings(tmp_path / name, validation_sample="pinned", data_secret=name) for name in "ab"]
    rows = [np.load(prepare(settings, progress=False).val_dir / "inputs.npy") for settings in pinned]
    assert np.array_equal(rows[0], rows[1])
    paths = prepared_paths(pinned[0])
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    texts = list(iter_texts([paths.raw_dir / "val" / "pool.parquet"]))
    openings = {tuple(ids[:8]) for ids in tokenizer.encode_batch(texts)}
    assert all(tuple(row[1:9].tolist()) in openings for row in rows[0])
