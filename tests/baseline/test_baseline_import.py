"""Importing the baseline train.py is cheap and side-effect free, and it defines the contract."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

from tests.baseline.tiny import BASELINE, load_baseline

# Runs in a fresh interpreter: records torch's global state and the process's threads before and
# after importing train.py, and every torch function called during the import.
PROBE = r"""
import importlib.util, json, os, sys, threading
import torch
from torch.overrides import TorchFunctionMode

class Recorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))

def state():
    return {
        "threads": threading.active_count(),
        "torch_threads": torch.get_num_threads(),
        "rng": torch.get_rng_state().sum().item(),
        "default_dtype": str(torch.get_default_dtype()),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda_initialized": torch.cuda.is_initialized(),
        "files": sorted(os.listdir(".")),
    }

before = state()
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
module = importlib.util.module_from_spec(spec)
recorder = Recorder()
with recorder:
    spec.loader.exec_module(module)
after = state()
print(json.dumps({"before": before, "after": after, "torch_calls": recorder.calls}))
"""


def test_import_does_no_tensor_work_and_changes_no_global_state(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(BASELINE)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["torch_calls"] == [], "importing train.py must not create tensors or run torch ops"
    assert report["after"] == report["before"]
    assert report["after"]["threads"] == 1
    assert report["after"]["files"] == []
    assert report["after"]["cuda_initialized"] is False


def test_defines_build_model_and_train_with_the_contract_signatures() -> None:
    module = load_baseline()
    assert list(inspect.signature(module.build_model).parameters) == ["ctx"]
    assert list(inspect.signature(module.train).parameters) == ["model", "ctx"]
