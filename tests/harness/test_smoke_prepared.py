"""The shared `test_data` fixture yields prepared data that the loader and scorer can use."""

from __future__ import annotations

import torch

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths, read_manifest
from harness.evaluate import load_eval_rows
from harness.loader import packed_batches


def test_prepared_data_feeds_loader_and_eval(test_data: tuple[HarnessSettings, PreparedPaths]) -> None:
    settings, paths = test_data
    manifest = read_manifest(settings)
    inputs, targets = next(
        packed_batches(paths.train_dir, 4, settings.seq_len, manifest["bos_id"], torch.device("cpu"), seed=0)
    )
    assert inputs.shape == targets.shape == (4, settings.seq_len)
    assert bool((inputs[:, 0] == manifest["bos_id"]).all())
    rows = load_eval_rows(paths.val_dir)
    assert rows.inputs.shape == (settings.eval_tokens // settings.seq_len, settings.seq_len)
    assert len(manifest["harness_id"]) == 64
