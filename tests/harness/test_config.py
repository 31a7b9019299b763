"""Settings: preset defaults < environment variables < explicit overrides; all in the harness id."""

from __future__ import annotations

import pytest

from harness.config import PRESETS, load_settings, scoring_fields
from harness.prepare import check_settings


def test_every_preset_passes_the_prepare_checks() -> None:
    for name in PRESETS:
        check_settings(load_settings(name))  # e.g. a whole number of evaluation rows


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
    changes = (
        {"time_budget": 9.0},
        {"seq_len": 32},
        {"vocab_size": 1024},
        {"eval_tokens": 64 * 8},
        {"validation_sample": "pinned"},
        {"doc_bpb_floor": 0.5},
    )
    for change in changes:
        assert scoring_fields(load_settings("test", **change)) != base


def test_the_secret_is_in_no_scoring_field_and_never_shown() -> None:
    """The validation sample it draws is covered by the harness id (the rows' hash), the secret
    itself by nothing that is shown or stored outside the data folder."""
    settings = load_settings("test", data_secret="hunter2")
    assert "hunter2" not in repr(settings) and "hunter2" not in settings.model_dump_json()
    assert "hunter2" not in str(scoring_fields(settings))
    assert scoring_fields(settings) == scoring_fields(load_settings("test"))
