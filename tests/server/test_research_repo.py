"""The research repo under concurrent use: objects are written without the repo's lock, and a
cached train.py is read without it (server/trainpy/research_repo.py), on a real git repository."""

from __future__ import annotations

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from server.trainpy.patches import PatchError
from server.trainpy.research_repo import ResearchRepo, init_research_repo

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


def _loose_objects(path: Path) -> set[str]:
    objects = path / "objects"
    return {f"{d.name}{f.name}" for d in objects.iterdir() if len(d.name) == 2 for f in d.iterdir()}


def test_a_change_is_cherry_picked_onto_another_commit_as_git_would(tmp_path: Path) -> None:
    """The change from a base to its commit, moved onto a commit that changed other lines: the new
    commit's parent is that commit, its train.py has both changes (checked with git itself) and the
    rest of its tree is that commit's."""
    lines = b"".join(b"K%d = %d\n" % (i, i) for i in range(10))  # the two changes 8 lines apart
    source = b"LR = 0.1\n" + lines + b"WIDTH = 64\n"
    base = init_research_repo(tmp_path / "repo", source, b"# program\n")
    repo = ResearchRepo(tmp_path / "repo")
    own = repo.commit_candidate(base, source.replace(b"LR = 0.1", b"LR = 0.2"), "lr\n", "ada")
    onto = repo.commit_candidate(base, source.replace(b"WIDTH = 64", b"WIDTH = 96"), "width\n", "bo")
    moved = repo.cherry_pick(base, own, onto, "lr again\n", "ada")
    repo.close()
    assert moved.commit is not None and moved.changes
    git_dir = ["git", "-C", str(tmp_path / "repo")]
    shown = subprocess.run([*git_dir, "show", f"{moved.commit}:train.py"], capture_output=True, check=True)
    assert shown.stdout == b"LR = 0.2\n" + lines + b"WIDTH = 96\n" == moved.source.encode()
    parents = subprocess.run([*git_dir, "rev-parse", f"{moved.commit}^@"], capture_output=True, text=True)
    assert parents.stdout.split() == [onto]
    tree = subprocess.run(
        [*git_dir, "ls-tree", "-r", "--name-only", moved.commit], capture_output=True, text=True
    )
    assert tree.stdout.split() == ["program.md", "train.py"]
    assert subprocess.run([*git_dir, "fsck", "--strict"], capture_output=True).returncode == 0


def test_a_change_that_does_not_apply_writes_nothing(tmp_path: Path) -> None:
    base = init_research_repo(tmp_path / "repo", BASELINE, b"# program\n")
    repo = ResearchRepo(tmp_path / "repo")
    own = repo.commit_candidate(base, b"LR = 0.2\n", "lr\n", "ada")
    other = repo.commit_candidate(base, b"LR = 0.3\n", "lr too\n", "bo")
    before = _loose_objects(tmp_path / "repo")
    with pytest.raises(PatchError):  # both changed the same line: it does not apply
        repo.cherry_pick(base, own, other, "again\n", "ada")
    repo.close()
    assert _loose_objects(tmp_path / "repo") == before
