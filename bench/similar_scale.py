"""Has this been tried? at scale: how long finding the similar experiments of a change takes in a
project with thousands of experiments, next to reading one page of GET /experiments.

    python bench/similar_scale.py [--experiments 5000] [--code-share 0.2] [--queries 50]

A real database (SQLite file, or PostgreSQL with --postgres: a scratch cluster) migrated to head
gets `--experiments` experiments with their stored change summaries, as submissions store them:
most are the random agent's mutations of the real baseline (one or two constants moved), a
`--code-share` of them change code (a line of the baseline's code rewritten, the same few lines
over and over, so that the code scan has real work). Then, in the same run and on the same
database, for `--queries` new changes of each kind:
- reference: one page (50) of GET /experiments as the API reads it (`list_page`);
- `find_similar` for a mutation of constants (index lookups only);
- `find_similar` for a change of code (index lookups plus the scan of stored code changes).
Printed: the median and worst time of each, and each as a ratio to the reference.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.mutation import mutate_constants
from server.core.db import Database, create_db_engine
from server.core.migrate import upgrade
from server.crud.experiments import list_page
from server.crud.similar import find_similar, store_change
from server.models import Experiment
from server.rules.similarity import Change
from server.trainpy.changes import summarize
from testkit.pg_scratch import new_database, scratch_cluster

BASELINE = (ROOT / "harness" / "baseline" / "train.py").read_text()
BASE_COMMIT = "b" * 40


def code_change(rng: random.Random) -> str:
    """The baseline with one of a few of its code lines rewritten (as agents rewrite the same spots)."""
    lines = BASELINE.splitlines(keepends=True)
    code = [i for i, line in enumerate(lines) if line.startswith("        ") and "=" in line][:8]
    i = rng.choice(code)
    lines[i] = lines[i].rstrip("\n") + f"  * {rng.choice((1, 2, 3))}\n"
    return "".join(lines)


def fill(db: Database, count: int, code_share: float, rng: random.Random) -> None:
    sources = [
        code_change(rng) if rng.random() < code_share else mutate_constants(BASELINE, rng)[0]
        for _ in range(200)
    ]
    summaries = [summarize(BASELINE, source) for source in sources]  # reused: summarizing is not measured
    with db.write() as session:
        for n in range(count):
            pick = n % len(sources)
            experiment = Experiment(
                source="agent",
                description=f"bench {n}",
                base_commit=BASE_COMMIT,
                commit_sha=hashlib.sha1(str(n).encode()).hexdigest(),
                train_py_blob=hashlib.sha1(f"{pick}".encode()).hexdigest(),
                status="reverted",
                valid_runs=1,
                val_bpb=1.0,
            )
            session.add(experiment)
            session.flush()
            store_change(session, experiment.id, summaries[pick])


def timed(work: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=5000)
    parser.add_argument("--code-share", type=float, default=0.2)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--postgres", action="store_true", help="on a scratch PostgreSQL cluster")
    args = parser.parse_args()
    rng = random.Random(1)
    with ExitStack() as stack:
        if args.postgres:
            url = new_database(stack.enter_context(scratch_cluster()))
        else:
            url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/bench.db"
        upgrade(url)
        db = Database(create_db_engine(url))
        fill(db, args.experiments, args.code_share, rng)
        constants = Change(summarize(BASELINE, mutate_constants(BASELINE, rng)[0]), BASE_COMMIT)
        code = Change(summarize(BASELINE, code_change(rng)), BASE_COMMIT)

        def page() -> object:
            with db.read() as session:
                return list_page(
                    session, status=None, agent=None, base=None, since=None, limit=50, before_id=None
                )

        def similar(change: Change) -> Callable[[], object]:
            def ask() -> object:
                with db.read() as session:
                    return find_similar(session, change, "0" * 40)

            return ask

        with db.read() as session:
            found = {
                name: len(find_similar(session, c, None))
                for name, c in (("constants", constants), ("code", code))
            }
        reference = timed(page, args.queries)
        rows = [
            ("GET /experiments page (reference)", reference),
            (
                f"similar: a mutation of constants ({found['constants']} found)",
                timed(similar(constants), args.queries),
            ),
            (f"similar: a change of code ({found['code']} found)", timed(similar(code), args.queries)),
        ]
        db.dispose()
    base = statistics.median(reference)
    where = "PostgreSQL" if args.postgres else "SQLite"
    print(
        f"{args.experiments} experiments ({args.code_share:.0%} changing code), {where}, "
        f"{args.queries} queries"
    )
    for name, times in rows:
        median, worst = statistics.median(times), max(times)
        print(
            f"  {name:<48} median {median * 1000:7.1f} ms  worst {worst * 1000:7.1f} ms  "
            f"ratio {median / base:5.2f}"
        )


if __name__ == "__main__":
    main()
