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
    for change in ({"time_budget": 9.0}, {"seq_len": 32}, {"vocab_size": 1024}, {"eval_tokens": 64 * 8}):
        assert scoring_fields(load_settings("test", **change)) != base
