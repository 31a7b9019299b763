"""`autoresearch init`: create the research repo from the baseline and queue the baseline of the
first track."""

from __future__ import annotations

from pathlib import Path

from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.core.migrate import upgrade
from server.crud.requeue import requeue_unmeasured_best
from server.crud.tracks import add_baseline, load_track
from server.models import FIRST_TRACK_ID, utcnow
from server.trainpy.research_repo import EXPERIMENT_REF_PREFIX, ResearchRepo, blob_sha, init_research_repo

HARNESS_BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline"
DEFAULT_TRAIN_PY = HARNESS_BASELINE / "train.py"
DEFAULT_PROGRAM_MD = HARNESS_BASELINE / "program.md"


class InitError(RuntimeError):
    pass


def init_project(
    settings: ServerSettings, train_py: Path = DEFAULT_TRAIN_PY, program_md: Path = DEFAULT_PROGRAM_MD
) -> int:
    """Create the repo and database state; return the id of the queued baseline experiment. On an
    existing project whose best has no valid measurement because its runs lost their workers, queue
    the best again and return its id instead."""
    for path in (train_py, program_md):
        if not path.is_file():
            raise InitError(f"{path}: no such file (the baseline to start the research repo from)")
    train_source = train_py.read_bytes()
    try:
        train_source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InitError(f"{train_py}: not UTF-8 text") from exc
    url = settings.resolved_database_url
    upgrade(url)
    db = Database(create_db_engine(url, settings.sqlite_busy_timeout_ms))
    try:
        with db.write() as session:
            if load_track(session, lock=True).best_commit is not None:
                again = requeue_unmeasured_best(session, FIRST_TRACK_ID, utcnow())
                if again is not None:  # its runs lost their workers: measure it first
                    return again.id
                raise InitError(
                    f"the database at {url} already has a project; use a new DATA_DIR or DATABASE_URL"
                )
        repo_path = settings.resolved_research_repo
        try:
            commit = init_research_repo(repo_path, train_source, program_md.read_bytes())
        except FileExistsError as exc:
            raise InitError(str(exc)) from exc
        with db.write() as session:
            track = load_track(session, lock=True)
            baseline = add_baseline(session, track, commit, blob_sha(train_source), utcnow())
            repo = ResearchRepo(repo_path)
            repo.set_experiment_ref(baseline.id, commit)
            repo.close()
            return baseline.id
    finally:
        db.dispose()


__all__ = ["EXPERIMENT_REF_PREFIX", "InitError", "init_project"]
