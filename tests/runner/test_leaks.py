"""No byte of validation text, nor the secret that chose it, is readable in any sandbox, for every data
source.

Each source is prepared with a canary planted in some validation documents and another at the start
of every training document; climbmix is downloaded from a local HTTP server standing in for the
dataset host (there is no internet here). Then a hostile candidate
(candidates/hostile/walks_sandbox.py) reads everything it can in the train, eval and probe
sandboxes: every file of the visible tree, every process's memory, open files and /proc entries,
/dev/shm and /tmp. It looks for the validation canaries, the installation's secret
(DATA_DIR/validation.secret) and the evaluation rows, as text and as token ids, by hashes of 32-byte
windows (tests/runner/leak_hash.py) that do not occur in the training text, and must find none. The
same walk must find the training canary, which the test writes into the candidate's own source, in
every sandbox, and the training canary's tokens in memory and /dev/shm once the train sandbox has
taken some batches: so the walk sees what is there, and the test can fail.

What a sandbox's file tree holds does not depend on the data source: the system folders and the
Python installation are bound the same way for every run, and nothing of the data folders is
(run_experiment refuses data inside them). So the whole tree, about 9 GB here, is read in the three
sandboxes of one run, against the patterns of all three sources; the runs of the other sources read
all the rest (memory, /proc, /dev/shm, /tmp, /sandbox, /etc, ...) in their three sandboxes, against
their own. That keeps the test to minutes on a busy 2-core machine."""

from __future__ import annotations

import base64
import json
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.config import CLIMBMIX_VAL_SHARD, HarnessSettings, load_settings
from harness.data import speeches
from harness.data.climbmix import shard_name
from harness.data.errors import DataError
from harness.data.shards import iter_texts
from harness.data.sources import train_shards
from harness.data.tokens import open_token_dir
from harness.data.validation import SECRET_FILE
from harness.data_layout import PreparedPaths
from harness.prepare import prepare
from harness.runner import run as runner
from harness.runner.sandbox import system_roots
from harness.tokenizer import load_tokenizer
from tests.fixtures_data import corpus_documents
from tests.harness.shard_server import Behaviour, ShardServer
from tests.runner.candidates import compose
from tests.runner.leak_hash import FIRST_BITS, first_buckets, hash_words, matching_windows, window_words

pytestmark = pytest.mark.heavy

LEAK_HASH = Path(__file__).resolve().parent / "leak_hash.py"
LABELS = ("validation text", "validation tokens", "training canary")
TOKEN_DTYPES = (np.int64, np.int32, np.uint16)
# A finding is at least this many consecutive windows at 16-byte steps: a common stretch of at
# least 32 + 3 * 16 = 80 bytes of text (about 20 tokens), or of 10 token ids stored as int64.
MIN_RUN = 4
# Walks and model builds take a while on a busy 2-core machine; none of it may cost the budget.
ALLOWANCE_S = 900.0
SOURCES = ("speeches", "local", "climbmix")


def canary(kind: str) -> str:
    """Lines that occur nowhere else: planted at the start of documents of one split."""
    return "".join(f"# {kind} canary {uuid.uuid4().hex}{uuid.uuid4().hex}\n" for _ in range(3))


def with_canary(docs: list[str], lines: str, every: int) -> list[str]:
    """`lines` at the start of one document in `every` (evaluation rows begin with documents, and
    the validation text should not be mostly canary)."""
    return [lines + doc if index % every == 0 else doc for index, doc in enumerate(docs)]


def text_words(text: bytes) -> list[np.ndarray]:
    """uint64 words of `text` at every byte offset: every 32-byte window lies in one of them."""
    return list(window_words(text))


def token_words(tokens: np.ndarray) -> list[np.ndarray]:
    """uint64 words of a token sequence as it would sit in memory or a file, in each dtype, at
    each token boundary."""
    parts = []
    for dtype in TOKEN_DTYPES:
        data = tokens.astype(dtype).tobytes()
        for offset in range(0, 8, np.dtype(dtype).itemsize):
            count = (len(data) - offset) // 8
            if count >= 4:
                parts.append(np.frombuffer(data, dtype=np.uint64, count=count, offset=offset))
    return parts


def hashes_of(words: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([hash_words(part) for part in words] or [np.empty(0, dtype=np.uint64)])


def eval_rows(paths: PreparedPaths) -> np.ndarray:
    """The evaluation rows, [N, T + 1] tokens, as the scorer holds them."""
    inputs = np.load(paths.val_dir / "inputs.npy")
    targets = np.load(paths.val_dir / "targets.npy")
    return np.concatenate([inputs, targets[:, -1:]], axis=1)


Patterns = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]  # words of each label


def source_patterns(
    settings: HarnessSettings, paths: PreparedPaths, val_canary: str, train_canary: str
) -> Patterns:
    """Words of what must not be found (validation text and the secret that drew it, validation
    token ids) and of the training canary, for one prepared source."""
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    rows = eval_rows(paths)
    secret = (Path(settings.data_dir) / SECRET_FILE).read_bytes()
    text = text_words(val_canary.encode()) + text_words(secret)
    for row in rows:  # the text of each document piece between BOS tokens
        for piece in np.split(row, np.flatnonzero(row == tokenizer.bos_id)):
            text += text_words(tokenizer.decode(piece[piece != tokenizer.bos_id]).encode())
    tokens = [words for row in rows for words in token_words(row)]
    canary_tokens = np.array(tokenizer.encode(train_canary)[:-2])  # its end may merge with what follows
    return text, tokens, text_words(train_canary.encode()) + token_words(canary_tokens)


def in_training(hashes: np.ndarray, heads: np.ndarray, paths: list[PreparedPaths]) -> np.ndarray:
    """Those of the sorted `hashes` whose windows also occur in the training text or tokens: they
    are legitimately visible, never a finding. `heads` is the table of the patterns' first words.

    The training text is checked as one buffer, its documents apart by 32 bytes of 0xFF (never in
    UTF-8 text, nor in the bytes of token ids), so that no window spans two documents. As in the
    walker, only the windows whose first word is in `heads` are hashed (a few in a thousand)."""
    found = [np.empty(0, dtype=np.uint64)]
    for prepared in paths:
        text = (b"\xff" * 32).join(doc.encode() for doc in iter_texts(train_shards(prepared.raw_dir)))
        for words in [*text_words(text), *token_words(open_token_dir(prepared.train_dir).tokens)]:
            _, index = matching_windows(words, 1, heads, hashes)
            found.append(hashes[index])
    return np.unique(np.concatenate(found))


def first_words(words: list[np.ndarray]) -> np.ndarray:
    """The table of the first words of every window of `words` (a bitmap of buckets, no text)."""
    table = np.zeros(1 << FIRST_BITS, dtype=bool)
    for part in words:
        table[first_buckets(part[:-3])] = True
    return table


def walker_args(
    patterns: list[Patterns], paths: list[PreparedPaths], skip: list[str], system: list[str]
) -> dict[str, Any]:
    """HOSTILE_ARGS of the walker: hashes and labels only, no text."""
    words = [[part for pattern in patterns for part in pattern[label]] for label in range(3)]
    searched = (np.unique(hashes_of(words[0])), np.unique(hashes_of(words[1])))
    trained = in_training(np.union1d(*searched), first_words(words[0] + words[1]), paths)
    parts = (
        np.setdiff1d(searched[0], trained),
        np.setdiff1d(searched[1], trained),
        np.unique(hashes_of(words[2])),
    )
    assert len(parts[0]) > 1000 and len(parts[1]) > 1000 and len(parts[2]) > 50
    hashes = np.concatenate(parts)
    labels = np.concatenate([np.full(len(part), label, dtype=np.uint8) for label, part in enumerate(parts)])
    order = np.argsort(hashes, kind="stable")
    return {
        "hashes": base64.b64encode(hashes[order].tobytes()).decode(),
        "labels": base64.b64encode(labels[order].tobytes()).decode(),
        "first_table": base64.b64encode(np.packbits(first_words(words[0] + words[1] + words[2]))).decode(),
        "label_names": list(LABELS),
        "min_run": MIN_RUN,
        "skip": skip,
        "system": system,
    }


def prepare_speeches(data_dir: Path, val_canary: str, train_canary: str, monkeypatch: pytest.MonkeyPatch):
    original = speeches.documents

    def planted(wheel: Path) -> tuple[list[str], list[str]]:
        train, pool = original(wheel)
        return with_canary(train, train_canary, 1), with_canary(pool, val_canary, 8)

    monkeypatch.setattr(speeches, "documents", planted)
    settings = load_settings("test", data_source="speeches", data_dir=data_dir)
    return settings, prepare(settings, progress=False)


def jsonl(path: Path, docs: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs))


def prepare_local(data_dir: Path, val_canary: str, train_canary: str, folder: Path):
    """The default corpus's training documents to train on, its pool's to hold out."""
    train, val = corpus_documents()
    folder.mkdir()
    jsonl(folder / "a_train.jsonl", with_canary(train[:2000], train_canary, 1))
    jsonl(folder / "z_val.jsonl", with_canary(val, val_canary, 8))
    settings = load_settings("test", data_source="local", data_dir=data_dir, local_data_dir=folder)
    return settings, prepare(settings, progress=False)


def prepare_climbmix(data_dir: Path, val_canary: str, train_canary: str, folder: Path):
    train, val = corpus_documents()
    folder.mkdir()
    files = {}
    half = len(val) // 2
    shards = {
        shard_name(0): with_canary(train[:2000], train_canary, 1),
        shard_name(CLIMBMIX_VAL_SHARD - 1): with_canary(val[:half], val_canary, 8),
        shard_name(CLIMBMIX_VAL_SHARD): with_canary(val[half:], val_canary, 8),
    }
    for name, docs in shards.items():
        pq.write_table(pa.table({"text": docs}), folder / name, row_group_size=256)
        files[name] = (folder / name).read_bytes()
    server = ShardServer(files, Behaviour())
    try:
        source = {"data_source": "climbmix", "climbmix_url": server.url, "climbmix_train_shards": 1}
        settings = load_settings("test", data_dir=data_dir, **source)
        return settings, prepare(settings, progress=False)
    finally:
        server.close()


Prepared = tuple[HarnessSettings, PreparedPaths, str, str]  # settings, paths, the two canaries


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Prepared]:
    """The three sources, prepared with their canaries."""
    prepared = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for source in SOURCES:
            folder = tmp_path_factory.mktemp(source)
            val_canary, train_canary = canary("validation"), canary("training")
            if source == "speeches":
                made = prepare_speeches(folder / "data", val_canary, train_canary, monkeypatch)
            elif source == "local":
                made = prepare_local(folder / "data", val_canary, train_canary, folder / "local")
            else:
                made = prepare_climbmix(folder / "data", val_canary, train_canary, folder / "shards")
            prepared[source] = (*made, val_canary, train_canary)
    return prepared


def walks(log: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in re.findall(r"^LEAKWALK (.*)$", log, re.MULTILINE)]


@pytest.mark.timeout(1800)  # reading the whole tree three times takes minutes on a busy machine
@pytest.mark.parametrize("source", SOURCES)
def test_no_sandbox_can_read_validation_text(
    planted: dict[str, Prepared], source: str, run_candidate, tmp_path: Path
) -> None:
    """The speeches case is slow (30 to 70 s) because it reads every byte a sandbox can see, about
    9 GB here, once; the other cases list those folders and read the rest."""
    settings, _, _, train_canary = planted[source]
    whole_tree = source == "speeches"  # then against every source's validation text
    searched = [planted[name] for name in (SOURCES if whole_tree else (source,))]
    patterns = [source_patterns(*found) for found in searched]
    system = sorted({str(root) for root in system_roots()} | {"/usr"})
    skip = [] if whole_tree else system
    candidate = compose(
        tmp_path,
        "hostile/walks_sandbox.py",
        include=(LEAK_HASH,),
        comment=train_canary,  # the walk must find this file, and the canary in it
        train_seconds=2.0,
        **walker_args(patterns, [found[1] for found in searched], skip, system if whole_tree else []),
    )
    assert all(found[2] not in candidate.read_text() for found in planted.values())
    # The walk reads everything a sandbox can see, far longer than a model takes to rebuild. The
    # score phase's bound allows a rebuild of at most 2 % of the budget, and on a CPU the cost of
    # training on STARTUP_TOKENS of its own tokens (harness.runner.scoring.score_budget, tested in
    # test_score_phase.py). So the budget is long, and the walker trains on a single row for a few
    # CPU seconds: this test is about what is visible, not about time.
    chosen = {**settings.model_dump(), "time_budget": 50 * ALLOWANCE_S, "compile_allowance": ALLOWANCE_S}
    result = run_candidate(candidate, **chosen)
    assert result.status in ("ok", "over_budget"), (result.error_class, result.error_message, result.log_tail)
    assert result.val_bpb is not None
    reports = walks(result.log_tail)
    assert sorted(report["walk"] for report in reports) == ["score", "score", "train", "train-after-data"]
    for report in reports:
        findings = report["findings"]
        assert findings["validation text"] == [] and findings["validation tokens"] == [], report
        found_in = [name for name, _ in findings["training canary"]]
        if report["walk"] == "train-after-data":  # the batches it holds, and its copy in /dev/shm
            assert any(name.startswith("/proc/") and "/mem " in name for name in found_in), report
            assert "/dev/shm/batch.bin" in found_in, report
        else:  # the tree it was given: its own source among the rest
            assert "/sandbox/candidate/train.py" in found_in, report
            if whole_tree and report["walk"] == "train":
                assert report["files"] > 10_000 and report["bytes"] > 1e9, report
    if whole_tree:
        # The system folders are the same read-only binds of the same host files in every sandbox
        # (harness/runner/sandbox.py: nothing a phase binds lands under them), so the train walk
        # reads them and the score walks only list them: the same files there, unchanged.
        listings = {
            tuple(report["system_listing"]) for report in reports if report["walk"] != "train-after-data"
        }
        assert len(listings) == 1 and next(iter(listings))[1] > 10_000, listings


@pytest.mark.parametrize("setting", ["data_dir", "local_data_dir"])
def test_data_inside_a_folder_every_sandbox_sees_is_refused(
    test_data: tuple[HarnessSettings, PreparedPaths],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    setting: str,
) -> None:
    """A DATA_DIR (or LOCAL_DATA_DIR) in, say, the virtualenv would be readable by train.py."""
    settings, paths = test_data
    visible = paths.root.parents[1] if setting == "data_dir" else tmp_path
    monkeypatch.setattr(runner, "system_roots", lambda: [Path("/usr"), visible])
    chosen = settings.model_copy(update={"local_data_dir": tmp_path / "corpus"})
    refusal = f"{setting.upper()}=.* lies inside {visible}, which every sandbox sees"
    with pytest.raises(DataError, match=refusal):
        runner.run_experiment(runner.RunRequest(Path(__file__), chosen))
