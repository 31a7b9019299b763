"""The `local` source and the precise errors for bad data, through `autoresearch prepare`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from harness.config import load_settings
from harness.data.shards import iter_texts
from harness.data_layout import prepared_paths, read_manifest
from tests.fixtures_data import corpus_documents


@pytest.fixture(autouse=True)
def small_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """These folders' validation files are far smaller than the least pool a sample is drawn from
    (its own test below): what is under test here is the rest of prepare."""
    monkeypatch.setenv("VAL_POOL_MIN_BYTES", "0")


@pytest.fixture(scope="module")
def documents() -> list[str]:
    train, _ = corpus_documents()
    return train[:600]


def write_parquet(path: Path, texts: list[str | None]) -> None:
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path)


def make_folder(folder: Path, documents: list[str]) -> Path:
    """A mixed folder: parquet and txt for training, jsonl last by name (the validation file)."""
    folder.mkdir()
    write_parquet(folder / "a.parquet", documents[:300])
    for i, doc in enumerate(documents[300:320]):
        (folder / f"b{i:02d}.txt").write_text(doc)
    with open(folder / "z_val.jsonl", "w") as handle:
        for doc in documents[400:600]:
            handle.write(json.dumps({"text": doc, "meta": 1}) + "\n")
    return folder


def prepare_cli(data_dir: Path, local: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["prepare", "--preset", "test", "--source", "local", "--local-dir", str(local)]
    code = main([*argv, "--data-dir", str(data_dir), "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_mixed_folder_prepares_with_the_last_file_as_validation(
    tmp_path: Path, documents: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_folder(tmp_path / "texts", documents)
    code, output = prepare_cli(tmp_path / "data", folder, capsys)
    assert code == 0, output
    settings = load_settings("test", data_source="local", data_dir=tmp_path / "data", local_data_dir=folder)
    paths = prepared_paths(settings)
    assert list(iter_texts([paths.raw_dir / "val" / "shard_val.parquet"])) == documents[400:600]
    assert list(iter_texts(sorted((paths.raw_dir / "train").glob("*.parquet")))) == documents[:320]
    assert read_manifest(settings)["train_docs"] == 320
    assert "harness id:" in output
    argv = ["prepare", "--preset", "test", "--source", "local", "--local-dir", str(folder), "--quiet"]
    again = main([*argv, "--data-dir", str(tmp_path / "data"), "--json"])
    shown = json.loads(capsys.readouterr().out)  # prepared already: only the figures, as JSON
    assert again == 0 and shown["data_dir"] == str(paths.root) and shown["train_docs"] == 320
    assert shown["harness_id"] == read_manifest(settings)["harness_id"]


ERROR_CASES = {
    "empty text column": (
        lambda f: write_parquet(f / "a.parquet", ["", None]),
        r"a\.parquet: no non-empty text",
    ),
    "no text column": (
        lambda f: pq.write_table(pa.table({"body": ["x"]}), f / "a.parquet"),
        r"a\.parquet: no 'text' column \(columns: body\)",
    ),
    "corrupt parquet": (
        lambda f: (f / "a.parquet").write_bytes(b"PAR1 this is not parquet"),
        r"a\.parquet: not a readable parquet file",
    ),
    "bad jsonl line": (
        lambda f: (f / "a.jsonl").write_text('{"text": "fine"}\n{"txt": "oops"}\n'),
        r"a\.jsonl:2: each line must be a JSON object with a string 'text'",
    ),
    "too little validation data": (
        lambda f: (f / "z_val.jsonl").write_text('{"text": "tiny"}\n'),
        r"too little validation data: shard_val\.parquet cannot fill the 32 rows of SEQ_LEN\+1=65 tokens",
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_bad_data_gets_a_message_naming_the_file_and_changes_nothing(
    case: str, tmp_path: Path, documents: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_folder(tmp_path / "texts", documents)
    damage, message = ERROR_CASES[case]
    damage(folder)
    code, output = prepare_cli(tmp_path / "data", folder, capsys)
    assert code == 2
    assert output.startswith("error: ")
    assert re.search(message, output), output
    assert not (tmp_path / "data" / "prepared" / "local-v512").exists()


def test_a_validation_file_smaller_than_the_least_pool_is_refused(
    tmp_path: Path, documents: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sample is drawn from at least a hundred times what a train.py may carry."""
    monkeypatch.delenv("VAL_POOL_MIN_BYTES")
    code, output = prepare_cli(tmp_path / "data", make_folder(tmp_path / "texts", documents), capsys)
    assert code == 2
    refusal = r"the held-out pool \(shard_val\.parquet\) holds [\d,]+ bytes of text, but"
    assert re.search(refusal, output), output
    assert "VAL_POOL_MIN_BYTES=6,400,000" in output and "LOCAL_VAL_FILE" in output
    assert not (tmp_path / "data" / "prepared" / "local-v512").exists()


def test_settings_errors_name_the_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = prepare_cli(tmp_path / "data", tmp_path / "missing", capsys)
    assert code == 2 and f"LOCAL_DATA_DIR={tmp_path / 'missing'} is not a folder" in output
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "one.txt").write_text("just one file")
    code, output = prepare_cli(tmp_path / "data", tmp_path / "only", capsys)
    assert code == 2 and "holds only one.txt, which is the validation file" in output


def test_vocab_size_too_small_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOCAB_SIZE", "200")
    code = main(["prepare", "--preset", "test", "--data-dir", str(tmp_path), "--quiet"])
    output = capsys.readouterr().err
    assert code == 2 and "VOCAB_SIZE=200 is out of range: it needs at least 261" in output
    assert not any(tmp_path.iterdir())


def test_prepare_shows_a_progress_bar_unless_quiet(
    tmp_path: Path, documents: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_folder(tmp_path / "texts", documents)
    argv = ["prepare", "--preset", "test", "--source", "local", "--local-dir", str(folder)]
    assert main([*argv, "--data-dir", str(tmp_path / "data")]) == 0
    shown = capsys.readouterr().err
    assert "320/320" in shown and "doc" in shown  # the tokenising bar counts the training documents
    assert main([*argv, "--data-dir", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert "320/320" not in capsys.readouterr().err
