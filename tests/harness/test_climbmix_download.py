"""The climbmix source against a local HTTP server (no internet here): it stands in for the
Hugging Face host and serves parquet shards we generate, with faults switched on per test:
failing requests, transfers cut short, servers that ignore Range, garbage bodies, a token check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.config import CLIMBMIX_VAL_SHARD, load_settings
from harness.data.climbmix import fetch_climbmix, shard_name
from harness.data.errors import DataError
from harness.data_layout import read_manifest
from harness.prepare import prepare
from tests.fixtures_data import corpus_documents
from tests.harness.shard_server import Behaviour, ShardServer


def parquet_bytes(texts: list[str], path: Path) -> bytes:
    pq.write_table(pa.table({"text": texts}), path, row_group_size=64)
    return path.read_bytes()


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two training shards and the held-out pool's two shards (the pinned one last), made from the
    default corpus."""
    folder = tmp_path_factory.mktemp("shards")
    train, val = corpus_documents()
    return {
        shard_name(0): parquet_bytes(train[:150], folder / "0.parquet"),
        shard_name(1): parquet_bytes(train[150:300], folder / "1.parquet"),
        shard_name(CLIMBMIX_VAL_SHARD - 1): parquet_bytes(val[200:400], folder / "pool.parquet"),
        shard_name(CLIMBMIX_VAL_SHARD): parquet_bytes(val[:200], folder / "val.parquet"),
    }


@pytest.fixture
def serve(shard_files: dict[str, bytes]) -> Iterator:
    servers: list[ShardServer] = []

    def start(behaviour: Behaviour) -> ShardServer:
        servers.append(ShardServer(shard_files, behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def climbmix_settings(server: ShardServer, data_dir: Path, **overrides: object):
    # The served pool is small: what is under test is the download (the pool's least size: test_prepare.py).
    values = {
        "climbmix_train_shards": 2,
        "download_backoff_s": 0.01,
        "download_retries": 4,
        "num_proc": 3,
        "val_pool_min_bytes": 0,
    }
    values.update(overrides)
    return load_settings("test", data_source="climbmix", data_dir=data_dir, climbmix_url=server.url, **values)


def downloaded(raw: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in raw.rglob("*.parquet")}


def test_prepare_downloads_shards_in_parallel_and_pins_the_last_as_validation(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour(meet=3))
    settings = climbmix_settings(server, tmp_path)
    paths = prepare(settings, progress=False)
    assert downloaded(paths.raw_dir) == shard_files
    pool = sorted(p.name for p in (paths.raw_dir / "val").iterdir())
    assert pool == ["shard_06541.parquet", "shard_06542.parquet"]
    assert server.behaviour.met == [True, True, True]  # three requests were in flight at once
    assert read_manifest(settings)["train_docs"] == 300
    assert not list(paths.raw_dir.rglob("*.part"))


def test_server_errors_are_retried_with_backoff(serve, shard_files: dict[str, bytes], tmp_path: Path) -> None:
    server = serve(Behaviour(fail_first=2))
    fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    assert downloaded(tmp_path / "raw") == shard_files
    assert all(count == 3 for count in server.behaviour.counts.values())


def test_a_transfer_cut_short_resumes_with_a_range_request(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour(cut_first=1))
    fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    assert downloaded(tmp_path / "raw") == shard_files
    for name, body in shard_files.items():
        ranges = [r for n, r in server.behaviour.requests if n == name]
        assert ranges == [None, f"bytes={len(body) // 2}-"]  # the second request continued the first


def test_a_server_ignoring_range_still_gives_a_whole_file(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour(cut_first=1, ignore_range=True))
    fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    assert downloaded(tmp_path / "raw") == shard_files


def test_a_body_that_is_not_parquet_is_fetched_again(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour(garbage_first=1))
    fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    assert downloaded(tmp_path / "raw") == shard_files


def test_giving_up_leaves_no_shard_under_its_final_name_and_a_rerun_resumes(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    down = serve(Behaviour(fail_first=1, cut_first=3))  # every attempt is cut short
    settings = climbmix_settings(down, tmp_path, download_retries=2)
    with pytest.raises(DataError, match=r"shard_0000\d\.parquet: download failed after 2 attempts"):
        prepare(settings, progress=False)
    raw = tmp_path / "prepared" / "climbmix-v512" / "raw"
    assert downloaded(raw) == {}  # nothing looks finished
    parts = {p.name: p.stat().st_size for p in raw.rglob("*.part")}
    assert parts  # but the partial transfers are kept...
    healthy = serve(Behaviour())
    prepare(climbmix_settings(healthy, tmp_path, download_retries=2), progress=False)
    assert downloaded(raw) == shard_files
    resumed = {n: r for n, r in healthy.behaviour.requests if r}
    assert resumed == {name.removesuffix(".part"): f"bytes={size}-" for name, size in parts.items()}


def test_hf_token_is_sent_and_its_absence_is_explained(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour(token="hf_secret"))
    with pytest.raises(DataError, match="HTTP 401, access denied; set HF_TOKEN"):
        fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    authorized = climbmix_settings(server, tmp_path, hf_token="hf_secret")
    fetch_climbmix(authorized, tmp_path / "raw", progress=False)
    assert downloaded(tmp_path / "raw") == shard_files


def test_a_missing_shard_names_the_url_and_the_settings(serve, tmp_path: Path) -> None:
    server = serve(Behaviour())
    with pytest.raises(DataError, match=r"shard_00002\.parquet: HTTP 404.*CLIMBMIX_TRAIN_SHARDS"):
        fetch_climbmix(climbmix_settings(server, tmp_path, climbmix_train_shards=3), tmp_path / "raw", False)


def test_fewer_shards_than_before_removes_the_extra_ones(
    serve, shard_files: dict[str, bytes], tmp_path: Path
) -> None:
    server = serve(Behaviour())
    fetch_climbmix(climbmix_settings(server, tmp_path), tmp_path / "raw", progress=False)
    fetch_climbmix(climbmix_settings(server, tmp_path, climbmix_train_shards=1), tmp_path / "raw", False)
    pool = [shard_name(CLIMBMIX_VAL_SHARD - 1), shard_name(CLIMBMIX_VAL_SHARD)]
    assert sorted(downloaded(tmp_path / "raw")) == [shard_name(0), *pool]
    pinned = climbmix_settings(server, tmp_path, climbmix_train_shards=1, validation_sample="pinned")
    fetch_climbmix(pinned, tmp_path / "raw", False)  # autoresearch's evaluation: the pinned shard alone
    assert sorted(downloaded(tmp_path / "raw")) == [shard_name(0), shard_name(CLIMBMIX_VAL_SHARD)]
