"""The research repo under concurrent use: objects are written without the repo's lock, and a
cached train.py is read without it (server/research_repo.py), on a real git repository."""

from __future__ import annotations

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server.research_repo import ResearchRepo, init_research_repo

BASELINE = b"LR = 0.1\n"


def test_commits_written_at_once_from_many_threads_are_whole(tmp_path: Path) -> None:
    base = init_research_repo(tmp_path / "repo", BASELINE, b"# program\n")
    repo = ResearchRepo(tmp_path / "repo")
    sources = [b"LR = 0.%d\n" % (i + 2) for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        commits = list(pool.map(lambda s: repo.commit_candidate(base, s, "change\n", "agent"), sources))
    for number, commit in enumerate(commits):
        repo.set_experiment_ref(number + 1, commit)
    repo.close()
    fresh = ResearchRepo(tmp_path / "repo")  # read back from disk, not from the caches
    assert [fresh.train_py(commit) for commit in commits] == sources
    fsck = subprocess.run(["git", "-C", str(tmp_path / "repo"), "fsck", "--strict"], capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_cached_train_py_is_read_while_another_thread_holds_the_lock(tmp_path: Path) -> None:
    """A write stalled on the disk holds the lock; submissions' reads of the base must not wait."""
    base = init_research_repo(tmp_path / "repo", BASELINE, b"# program\n")
    repo = ResearchRepo(tmp_path / "repo")
    assert repo.train_py(base) == BASELINE  # now cached
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with repo.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(repo.train_py(base)))
    reader.start()
    reader.join(2)
    release.set()
    holder.join()
    repo.close()
    assert read == [BASELINE]
