"""Settings: preset defaults < environment variables < explicit overrides; all in the harness id."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import PRESETS, load_settings, scoring_fields
from harness.data.builtin import corpus_documents, max_validation_tokens, stdlib_root
from harness.data.errors import DataError
from harness.prepare import check_settings, prepare


def test_every_preset_passes_the_prepare_checks() -> None:
    for name in PRESETS:
        check_settings(load_settings(name))  # e.g. a whole number of evaluation rows


def test_h100_with_the_builtin_corpus_fails_at_once_with_the_reason(tmp_path: Path) -> None:
    settings = load_settings("h100", data_source="builtin", data_dir=tmp_path / "data")
    needed = settings.eval_tokens // settings.seq_len * (settings.seq_len + 1)
    assert needed > max_validation_tokens(stdlib_root())
    with pytest.raises(
        DataError, match=r"the built-in corpus has at most [\d,]+ validation tokens, but preset h100"
    ):
        prepare(settings)
    assert not (tmp_path / "data").exists()  # refused before any work


def test_the_validation_bound_counts_the_documents_prepare_writes() -> None:
    # Tokens come from a byte-level BPE (each covers >= 1 byte), plus one BOS per document.
    _train, val = corpus_documents(stdlib_root())
    assert max_validation_tokens(stdlib_root()) == sum(len(doc.encode()) + 1 for doc in val)


def test_environment_overrides_the_preset_and_arguments_override_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEQ_LEN", "128")
    monkeypatch.setenv("DATA_SOURCE", "local")
    settings = load_settings("test")
    assert settings.seq_len == 128 and settings.data_source == "local"
    assert settings.vocab_size == PRESETS["test"]["vocab_size"]
    assert load_settings("test", seq_len=32).seq_len == 32
    monkeypatch.setenv("PRESET", "h100")
    assert load_settings().time_budget == 300.0


def test_every_scoring_value_is_in_the_scoring_fields() -> None:
    base = scoring_fields(load_settings("test"))
    for change in ({"time_budget": 9.0}, {"seq_len": 32}, {"vocab_size": 1024}, {"eval_tokens": 64 * 8}):
        assert scoring_fields(load_settings("test", **change)) != base
