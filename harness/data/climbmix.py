"""The `climbmix` source: shards of karpathy/climbmix-400b-shuffle, downloaded over HTTP.

Training uses the first CLIMBMIX_TRAIN_SHARDS shards (shard_00000.parquet, ...); the last shard
of the dataset, shard_06542.parquet, is pinned as the validation split.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from harness.config import CLIMBMIX_VAL_SHARD, HarnessSettings
from harness.data.download import DownloadPolicy, download_all
from harness.data.errors import DataError


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def climbmix_jobs(settings: HarnessSettings, raw_dir: Path) -> list[tuple[str, Path]]:
    count = settings.climbmix_train_shards
    if not 1 <= count <= CLIMBMIX_VAL_SHARD:
        raise DataError(f"CLIMBMIX_TRAIN_SHARDS={count} must be between 1 and {CLIMBMIX_VAL_SHARD}")
    base = settings.climbmix_url.rstrip("/")
    jobs = [(f"{base}/{shard_name(i)}", raw_dir / "train" / shard_name(i)) for i in range(count)]
    val_name = shard_name(CLIMBMIX_VAL_SHARD)
    jobs.append((f"{base}/{val_name}", raw_dir / "val" / val_name))
    return jobs


def fetch_climbmix(settings: HarnessSettings, raw_dir: Path, progress: bool) -> None:
    """Download the shards not yet present; shards no longer wanted (fewer CLIMBMIX_TRAIN_SHARDS)
    are removed, so that only the configured ones are tokenized."""
    jobs = climbmix_jobs(settings, raw_dir)
    wanted = {dest for _, dest in jobs}
    for stale in [*raw_dir.glob("train/*.parquet"), *raw_dir.glob("val/*.parquet")]:
        if stale not in wanted:
            stale.unlink()
    policy = DownloadPolicy(
        retries=settings.download_retries,
        backoff_s=settings.download_backoff_s,
        timeout_s=settings.download_timeout_s,
        token=settings.hf_token,
    )
    with tqdm(total=len(jobs), unit="shard", desc="download", disable=not progress) as bar:
        bar.update(sum(1 for _, dest in jobs if dest.exists()))
        download_all(
            [(url, dest) for url, dest in jobs if not dest.exists()],
            policy,
            settings.num_proc,
            on_done=lambda _: bar.update(1),
        )
