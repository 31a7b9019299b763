"""Resumable, parallel HTTP downloads of parquet shards.

Each file is fetched into `<name>.part`; an interrupted transfer continues from where it stopped
with an HTTP Range request, failures are retried with exponential backoff, and the file gets its
final name (an atomic rename) only once it is complete and parquet can read its footer. A file
that already has its final name is never fetched again, so re-running resumes a partial download.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from harness.data.errors import DataError


@dataclass(frozen=True)
class DownloadPolicy:
    retries: int = 5
    backoff_s: float = 1.0
    timeout_s: float = 60.0
    token: str | None = None  # sent as a bearer token (HF_TOKEN)


class RetryableError(Exception):
    """A failure worth another attempt: a server error, a cut transfer, a damaged file."""


def _headers(policy: DownloadPolicy, have: int) -> dict[str, str]:
    headers = {"Accept-Encoding": "identity"}  # byte ranges of the file itself, not of an encoding
    if policy.token:
        headers["Authorization"] = f"Bearer {policy.token}"
    if have:
        headers["Range"] = f"bytes={have}-"
    return headers


def _attempt(client: httpx.Client, url: str, part: Path, policy: DownloadPolicy) -> None:
    """One request: continue `part` from its current size, up to the end of the file."""
    have = part.stat().st_size if part.exists() else 0
    with client.stream("GET", url, headers=_headers(policy, have)) as response:
        status = response.status_code
        if status == 416:  # our partial file is not a prefix of theirs: start over
            part.unlink()
            raise RetryableError("range not satisfiable, restarting the file")
        if status in (401, 403):
            raise DataError(
                f"{url}: HTTP {status}, access denied; set HF_TOKEN to a token that can read this dataset"
            )
        if status == 404:
            raise DataError(f"{url}: HTTP 404, no such file; check CLIMBMIX_URL and CLIMBMIX_TRAIN_SHARDS")
        if status == 429 or status >= 500:
            raise RetryableError(f"HTTP {status}")
        if status not in (200, 206):
            raise DataError(f"{url}: unexpected HTTP {status}")
        resumed = status == 206
        if resumed and not response.headers.get("content-range", "").startswith(f"bytes {have}-"):
            part.unlink()
            where = response.headers.get("content-range")
            raise RetryableError(f"server resumed at the wrong offset ({where})")
        length = response.headers.get("content-length")
        expected = int(length) + (have if resumed else 0) if length is not None else None
        with open(part, "ab" if resumed else "wb") as out:
            for chunk in response.iter_raw():  # as received: a cut transfer keeps what arrived
                out.write(chunk)
    size = part.stat().st_size
    if expected is not None and size != expected:
        raise RetryableError(f"transfer ended at {size} of {expected} bytes")


def _verify_parquet(part: Path) -> None:
    try:
        pq.ParquetFile(part).close()
    except (pa.ArrowException, OSError) as exc:
        part.unlink()
        raise RetryableError(f"downloaded file is not valid parquet ({exc})") from exc


def download_file(client: httpx.Client, url: str, dest: Path, policy: DownloadPolicy) -> None:
    """Fetch `url` to `dest` unless `dest` exists; resumable, retried, atomic."""
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    # The download policy (tenacity): retryable failures only, `retries` attempts in all, pauses
    # of backoff_s, 2*backoff_s, 4*backoff_s ...
    attempts = Retrying(
        retry=retry_if_exception_type((RetryableError, httpx.TransportError)),
        stop=stop_after_attempt(policy.retries),
        wait=wait_exponential(multiplier=policy.backoff_s),
        reraise=True,
    )
    try:
        attempts(_fetch, client, url, part, policy)
    except (RetryableError, httpx.TransportError) as last_error:
        raise DataError(
            f"{url}: download failed after {policy.retries} attempts (last error: {last_error}); "
            "check the network and run `autoresearch prepare` again, it resumes where it stopped"
        ) from last_error
    os.replace(part, dest)


def _fetch(client: httpx.Client, url: str, part: Path, policy: DownloadPolicy) -> None:
    _attempt(client, url, part, policy)
    _verify_parquet(part)


def download_all(
    jobs: list[tuple[str, Path]],
    policy: DownloadPolicy,
    num_proc: int,
    on_done: Callable[[Path], None] = lambda path: None,
) -> None:
    """Download (url, dest) pairs, `num_proc` at a time; the first failure is raised after all stop."""
    with (
        httpx.Client(follow_redirects=True, timeout=policy.timeout_s) as client,
        ThreadPoolExecutor(max_workers=max(1, num_proc)) as pool,
    ):

        def run(job: tuple[str, Path]) -> None:
            download_file(client, job[0], job[1], policy)
            on_done(job[1])

        for future in [pool.submit(run, job) for job in jobs]:
            future.result()
