"""The research repo: a bare git repository managed with GitPython.

Layout: branch `best` (HEAD points at it) is the current best; every experiment is one commit
whose parent is its base, on its own ref `refs/experiments/<id>`, so every attempt's diff stays
browsable (`git fetch <repo> 'refs/experiments/*:refs/experiments/*'`).

The repo is bare, so there is no working tree that could be left dirty: candidate commits are
built object by object (blob, tree, commit) and refs are written directly. All access goes
through one lock, because GitPython's objects are not thread-safe; one server process per repo.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from io import BytesIO
from pathlib import Path

import git
import gitdb.exc
from git.objects.fun import tree_to_stream
from gitdb import IStream
from gitdb.db import LooseObjectDB

TRAIN_PY = "train.py"
PROGRAM_MD = "program.md"
BEST_BRANCH = "best"
EXPERIMENT_REF_PREFIX = "refs/experiments/"
_BLOB_MODE = 0o100644
_HEX_ID = re.compile(r"[0-9a-fA-F]{4,40}")
_SERVER_ACTOR = git.Actor("autoresearch server", "server@autoresearch.invalid")


class UnknownCommit(LookupError):
    """The commit does not exist in the research repo (or has no train.py)."""


def blob_sha(content: bytes) -> str:
    """The git blob id of `content` (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _agent_actor(agent: str) -> git.Actor:
    return git.Actor(agent, f"{agent}@agents.autoresearch.invalid")


def init_research_repo(path: Path, train_py: bytes, program_md: bytes) -> str:
    """Create the bare repo with the baseline on `best`; return the baseline commit id."""
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists and is not empty; choose another --repo or remove it")
    repo = git.Repo.init(path, bare=True, initial_branch=BEST_BRANCH)
    research = ResearchRepo(path)
    with research.lock:
        tree = research._write_tree({TRAIN_PY: train_py, PROGRAM_MD: program_md})
        commit = research._write_commit(tree.binsha, [], "Baseline\n", _SERVER_ACTOR)
        git.Head.create(research.repo, BEST_BRANCH, commit, force=True)
    research.close()
    repo.close()
    return commit


class ResearchRepo:
    def __init__(self, path: Path, cache_size: int = 2048) -> None:
        self.path = path
        self.repo = git.Repo(path)
        # Objects are written in Python (GitPython's default store runs `git hash-object` per object).
        self._objects = LooseObjectDB(str(Path(self.repo.git_dir) / "objects"))
        self.lock = threading.RLock()
        self._train_py_cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_size = cache_size

    def close(self) -> None:
        self.repo.close()

    def _store(self, kind: bytes, data: bytes) -> bytes:
        return self._objects.store(IStream(kind, len(data), BytesIO(data))).binsha

    def _write_blob(self, content: bytes) -> bytes:
        return self._store(git.Blob.type, content)

    def _write_commit(self, tree: bytes, parents: list[str], message: str, author: git.Actor) -> str:
        stamp = f"{int(time.time())} +0000"
        lines = [f"tree {tree.hex()}", *(f"parent {p}" for p in parents)]
        lines.append(f"author {author.name} <{author.email}> {stamp}")
        lines.append(f"committer {_SERVER_ACTOR.name} <{_SERVER_ACTOR.email}> {stamp}")
        data = ("\n".join(lines) + "\n\n" + message).encode()
        return self._store(git.Commit.type, data).hex()

    def _write_tree(self, files: dict[str, bytes]) -> git.Tree:
        entries = sorted((self._write_blob(data), _BLOB_MODE, name) for name, data in files.items())
        return self._store_tree(entries)

    def _store_tree(self, entries: list[tuple[bytes, int, str]]) -> git.Tree:
        entries.sort(key=lambda entry: entry[2])  # flat tree of files: plain name order
        stream = BytesIO()
        tree_to_stream(entries, stream.write)
        return git.Tree(self.repo, self._store(git.Tree.type, stream.getvalue()))

    def _commit(self, sha: str) -> git.Commit:
        try:
            commit = self.repo.commit(sha)
        except (ValueError, git.BadName, git.BadObject, gitdb.exc.ODBError) as exc:
            raise UnknownCommit(sha) from exc
        if not isinstance(commit, git.Commit):
            raise UnknownCommit(sha)
        return commit

    def resolve_commit(self, rev: str) -> str:
        """The full id of the commit named by a full or abbreviated (>= 4 hex digits) id."""
        if not _HEX_ID.fullmatch(rev):
            raise UnknownCommit(rev)
        with self.lock:
            return self._commit(rev.lower()).hexsha

    def has_commit(self, sha: str) -> bool:
        with self.lock:
            try:
                self._commit(sha)
            except UnknownCommit:
                return False
            return True

    def train_py(self, commit_sha: str) -> bytes:
        """The train.py of a commit (cached: commits never change)."""
        with self.lock:
            cached = self._train_py_cache.get(commit_sha)
            if cached is not None:
                self._train_py_cache.move_to_end(commit_sha)
                return cached
            commit = self._commit(commit_sha)
            try:
                data = commit.tree[TRAIN_PY].data_stream.read()
            except KeyError as exc:
                raise UnknownCommit(commit_sha) from exc
            self._train_py_cache[commit_sha] = data
            if len(self._train_py_cache) > self._cache_size:
                self._train_py_cache.popitem(last=False)
            return data

    def commit_candidate(self, base_sha: str, train_py: bytes, message: str, agent: str) -> str:
        """Write a commit on top of `base_sha` that replaces train.py; no ref points at it yet."""
        with self.lock:
            base = self._commit(base_sha)
            new_blob = self._write_blob(train_py)
            entries = [
                (new_blob if name == TRAIN_PY else binsha, mode, name)
                for binsha, mode, name in base.tree._cache
            ]
            tree = self._store_tree(entries)
            commit = self._write_commit(tree.binsha, [base.hexsha], message, _agent_actor(agent))
            self._train_py_cache[commit] = train_py
            return commit

    def set_experiment_ref(self, experiment_id: int, commit_sha: str) -> None:
        with self.lock:
            git.Reference.create(self.repo, f"{EXPERIMENT_REF_PREFIX}{experiment_id}", commit_sha, force=True)

    def delete_experiment_ref(self, experiment_id: int) -> None:
        with self.lock:
            ref = git.Reference(self.repo, f"{EXPERIMENT_REF_PREFIX}{experiment_id}")
            if ref.is_valid():
                git.Reference.delete(self.repo, ref.path)

    def experiment_ref(self, experiment_id: int) -> str | None:
        with self.lock:
            ref = git.Reference(self.repo, f"{EXPERIMENT_REF_PREFIX}{experiment_id}")
            return ref.commit.hexsha if ref.is_valid() else None

    def best(self) -> str:
        with self.lock:
            return self.repo.heads[BEST_BRANCH].commit.hexsha

    def set_best(self, commit_sha: str) -> None:
        with self.lock:
            self.repo.heads[BEST_BRANCH].set_commit(self._commit(commit_sha))

    def parent(self, commit_sha: str) -> str | None:
        with self.lock:
            parents = self._commit(commit_sha).parents
            return parents[0].hexsha if parents else None
