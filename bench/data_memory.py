"""Peak memory of data preparation and of the loader, for 1x and 10x the data.

    python bench/data_memory.py [--shard-mb 4] [--shards 4] [--factor 10]

Generates a local corpus of parquet shards (texts of the default corpus, repeated) with
`--shards` shards for 1x and `--shards * --factor` shards of the same size for 10x, then in a
fresh process for each: runs `prepare` (local source, cpu preset) and reports its peak RSS; then
draws 200 batches from packed_batches over the prepared token files and reports that peak RSS.
Memory stays flat when the 10x figures are within 10% of the 1x ones. The tokenizer learns from
the same number of characters in both (TOKENIZER_MAX_CHARS), as in any real preparation.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.data import speeches

TOKENIZER_CHARS = 4_000_000
DOWNLOADS = Path(__file__).resolve().parents[1] / "var" / "downloads"


def corpus_documents() -> tuple[list[str], list[str]]:
    """The default corpus's (training, pool) documents."""
    return speeches.documents(speeches.download(DOWNLOADS))


LOADER_BATCHES = 200


def make_corpus(folder: Path, shards: int, shard_bytes: int, documents: list[str]) -> None:
    """`shards` training shards of about `shard_bytes` of text, then a fixed validation file."""
    folder.mkdir(parents=True)
    position = 0
    for index in range(shards):
        texts: list[str] = []
        size = 0
        while size < shard_bytes:
            text = documents[position % len(documents)]
            texts.append(text)
            size += len(text)
            position += 1
        pq.write_table(pa.table({"text": texts}), folder / f"train_{index:05d}.parquet", row_group_size=1024)
    _, val = corpus_documents()
    pq.write_table(pa.table({"text": val}), folder / "z_val.parquet")


def child(mode: str, data_dir: Path, corpus: Path) -> None:
    """Runs in a fresh process; prints its peak RSS in MiB (and what it did) as JSON."""
    from harness.config import load_settings

    settings = load_settings(
        "cpu",
        data_source="local",
        data_dir=data_dir,
        local_data_dir=corpus,
        tokenizer_max_chars=TOKENIZER_CHARS,
        num_proc=2,
    )
    if mode == "prepare":
        from harness.data_layout import read_manifest
        from harness.prepare import prepare

        prepare(settings, progress=False)
        done = {"train_tokens": read_manifest(settings)["train_tokens"]}
    else:
        import torch

        from harness.data_layout import prepared_paths, read_manifest
        from harness.loader import packed_batches

        torch.set_num_threads(1)
        paths = prepared_paths(settings)
        bos = read_manifest(settings)["bos_id"]
        batches = packed_batches(paths.train_dir, 32, settings.seq_len, bos, torch.device("cpu"), seed=0)
        for _ in range(LOADER_BATCHES):
            next(batches)
        done = {"batches": LOADER_BATCHES}
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak_mib, **done}))


def measure(mode: str, data_dir: Path, corpus: Path) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(data_dir), str(corpus)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shard-mb", type=float, default=4.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "DATA_DIR", "CORPUS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return

    documents, _ = corpus_documents()
    work = Path(tempfile.mkdtemp(prefix="data-memory-"))
    try:
        results = {}
        for label, shards in (("1x", args.shards), (f"{args.factor}x", args.shards * args.factor)):
            corpus = work / f"corpus-{label}"
            make_corpus(corpus, shards, int(args.shard_mb * 1e6), documents)
            data_dir = work / f"data-{label}"
            prepared = measure("prepare", data_dir, corpus)
            loaded = measure("loader", data_dir, corpus)
            results[label] = (prepared, loaded)
            print(
                f"{label:>4}: {shards * args.shard_mb:6.0f} MB text, "
                f"{prepared['train_tokens']:>12,} tokens | "
                f"prepare peak RSS {prepared['peak_mib']:7.1f} MiB | "
                f"loader ({LOADER_BATCHES} batches) peak RSS {loaded['peak_mib']:7.1f} MiB"
            )
            shutil.rmtree(corpus)
            shutil.rmtree(data_dir)
        (p1, l1), (p10, l10) = results.values()
        print(
            f"{args.factor}x vs 1x: prepare {100 * (p10['peak_mib'] / p1['peak_mib'] - 1):+.1f}%, "
            f"loader {100 * (l10['peak_mib'] / l1['peak_mib'] - 1):+.1f}% (flat: within 10%)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
