"""The `climbmix` source: shards of karpathy/climbmix-400b-shuffle, downloaded over HTTP.

Training uses the first CLIMBMIX_TRAIN_SHARDS shards (shard_00000.parquet, ...). The held-out pool
the validation sample is drawn from is the dataset's last CLIMBMIX_POOL_SHARDS shards, ending with
shard_06542.parquet, autoresearch's pinned validation shard (VALIDATION_SAMPLE=pinned: that shard
alone, as autoresearch evaluates it).
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from harness.config import CLIMBMIX_VAL_SHARD, HarnessSettings, ValidationSample
from harness.data.download import DownloadPolicy, download_all
from harness.data.errors import DataError


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def pool_shards(settings: HarnessSettings) -> list[int]:
    """The shards of the held-out pool, the dataset's last ones."""
    count = 1 if settings.validation_sample == ValidationSample.PINNED else settings.climbmix_pool_shards
    return list(range(CLIMBMIX_VAL_SHARD - count + 1, CLIMBMIX_VAL_SHARD + 1))


def climbmix_jobs(settings: HarnessSettings, raw_dir: Path) -> list[tuple[str, Path]]:
    count, pool = settings.climbmix_train_shards, pool_shards(settings)
    if not 1 <= count <= pool[0]:
        raise DataError(
            f"CLIMBMIX_TRAIN_SHARDS={count} must be between 1 and {pool[0]} (the shards from "
            f"{pool[0]} on are the held-out pool, CLIMBMIX_POOL_SHARDS={len(pool)})"
        )
    base = settings.climbmix_url.rstrip("/")
    jobs = [(f"{base}/{shard_name(i)}", raw_dir / "train" / shard_name(i)) for i in range(count)]
    jobs += [(f"{base}/{shard_name(i)}", raw_dir / "val" / shard_name(i)) for i in pool]
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
