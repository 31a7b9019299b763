"""The research repo: a bare git repository managed with GitPython.

Layout: branch `best` (HEAD points at it) is the first track's current best, and
`tracks/<name>/best` each other track's (`best_branch`); every experiment is one commit
whose parent is its base, on its own ref `refs/experiments/<id>`, so every attempt's diff stays
browsable (`git fetch <repo> 'refs/experiments/*:refs/experiments/*'`).

The repo is bare, so there is no working tree that could be left dirty: candidate commits are
built object by object (blob, tree, commit) and refs are written directly. Objects are read and
written in Python (gitdb's loose object store), falling back to GitPython's `git cat-file` only
for objects that are not loose (after a `git gc`): GitPython's defaults start a `git` process
round trip per object, which dominated the cost of a submission. GitPython's objects are not
thread-safe, so refs and the caches go through one lock; one server process per repo. New objects
are written without it: gitdb writes each to a temporary file and renames it into place, so
writers cannot collide, and a write that stalls on the disk (bench/api_load.py saw it) no longer
holds up every submission's cached reads of train.py behind it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from io import BytesIO
from pathlib import Path
from typing import TypeVar

import git
import gitdb.exc
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream
from gitdb.db import LooseObjectDB

from server.trainpy.patches import carry_over

TRAIN_PY = "train.py"
PROGRAM_MD = "program.md"
BEST_BRANCH = "best"
TRACK_BRANCH = "tracks/{name}/best"
EXPERIMENT_REF_PREFIX = "refs/experiments/"
_BLOB_MODE = 0o100644
_BLOB, _TREE, _COMMIT = b"blob", b"tree", b"commit"
_SERVER_ACTOR = git.Actor("autoresearch server", "server@autoresearch.invalid")
TreeEntries = list[tuple[bytes, int, str]]
V = TypeVar("V")


class UnknownCommit(LookupError):
    """The commit does not exist in the research repo (or has no train.py)."""


@dataclass(frozen=True)
class Moved:
    """A change moved onto another commit: that commit's train.py (`onto`), the train.py with the
    change (`source`), and the commit written for it, if one was."""

    onto: str
    source: str
    commit: str | None = None

    @property
    def changes(self) -> bool:
        """Whether the change changes anything there (False: it is already contained)."""
        return self.source != self.onto


def blob_sha(content: bytes) -> str:
    """The git blob id of `content` (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def best_branch(first: bool, name: str) -> str:
    """A track's best branch: `best` for the first track (as before tracks), else one of its own."""
    return BEST_BRANCH if first else TRACK_BRANCH.format(name=name)


def _agent_actor(agent: str) -> git.Actor:
    return git.Actor(agent, f"{agent}@agents.autoresearch.invalid")


def init_research_repo(path: Path, train_py: bytes, program_md: bytes) -> str:
    """Create the bare repo with the baseline on `best`; return the baseline commit id."""
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists and is not empty; choose another --repo or remove it")
    git.Repo.init(path, bare=True, initial_branch=BEST_BRANCH).close()
    research = ResearchRepo(path)
    try:
        with research.lock:
            tree = research._store_tree(
                [
                    (research._write_blob(train_py), _BLOB_MODE, TRAIN_PY),
                    (research._write_blob(program_md), _BLOB_MODE, PROGRAM_MD),
                ]
            )
            commit = research._write_commit(tree, [], "Baseline\n", _SERVER_ACTOR)
            research._write_ref(f"refs/heads/{BEST_BRANCH}", commit)
    finally:
        research.close()
    return commit


def _remember(cache: OrderedDict[str, V], key: str, value: V, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > size:
        cache.popitem(last=False)


class ResearchRepo:
    def __init__(self, path: Path, cache_size: int = 4096) -> None:
        self.path = path
        self.repo = git.Repo(path)
        self._objects = LooseObjectDB(str(Path(self.repo.git_dir) / "objects"))
        self.lock = threading.RLock()
        # Commits never change: their trees and train.py are cached by commit id.
        self._cache_size = cache_size
        self._trees: OrderedDict[str, TreeEntries] = OrderedDict()
        self._train_py: OrderedDict[str, bytes] = OrderedDict()

    def close(self) -> None:
        self.repo.close()

    # Objects -----------------------------------------------------------------------------------

    def _store(self, kind: bytes, data: bytes) -> bytes:
        return self._objects.store(IStream(kind, len(data), BytesIO(data))).binsha

    def _read(self, binsha: bytes, kind: bytes) -> bytes:
        try:
            stream = self._objects.stream(binsha)
        except gitdb.exc.BadObject:
            try:
                stream = self.repo.odb.stream(binsha)  # packed (after a git gc)
            except (ValueError, gitdb.exc.ODBError) as exc:
                raise UnknownCommit(binsha.hex()) from exc
        if stream.type != kind:
            raise UnknownCommit(binsha.hex())
        return stream.read()

    def _write_blob(self, content: bytes) -> bytes:
        return self._store(_BLOB, content)

    def _store_tree(self, entries: TreeEntries) -> bytes:
        entries.sort(key=lambda entry: entry[2])  # flat tree of files: plain name order
        stream = BytesIO()
        tree_to_stream(entries, stream.write)
        return self._store(_TREE, stream.getvalue())

    def _write_commit(self, tree: bytes, parents: list[str], message: str, author: git.Actor) -> str:
        stamp = f"{int(time.time())} +0000"
        lines = [f"tree {tree.hex()}", *(f"parent {p}" for p in parents)]
        lines.append(f"author {author.name} <{author.email}> {stamp}")
        lines.append(f"committer {_SERVER_ACTOR.name} <{_SERVER_ACTOR.email}> {stamp}")
        data = ("\n".join(lines) + "\n\n" + message).encode()
        return self._store(_COMMIT, data).hex()

    def _tree(self, commit_sha: str) -> TreeEntries:
        cached = self._trees.get(commit_sha)
        if cached is not None:
            return cached
        try:
            header = self._read(bytes.fromhex(commit_sha), _COMMIT).split(b"\n", 1)[0]
        except ValueError as exc:
            raise UnknownCommit(commit_sha) from exc
        if not header.startswith(b"tree "):
            raise UnknownCommit(commit_sha)
        entries = tree_entries_from_data(self._read(bytes.fromhex(header[5:].decode()), _TREE))
        _remember(self._trees, commit_sha, entries, self._cache_size)
        return entries

    # Reading -----------------------------------------------------------------------------------

    def train_py(self, commit_sha: str) -> bytes:
        """The train.py of a commit (cached: commits never change)."""
        cached = self._train_py.get(commit_sha)  # one dict lookup, atomic: a hit needs no lock
        if cached is not None:
            return cached
        data = self._file(commit_sha, TRAIN_PY)
        with self.lock:
            _remember(self._train_py, commit_sha, data, self._cache_size)
        return data

    def program_md(self, commit_sha: str) -> bytes:
        """The program.md of a commit: the rules agents follow (read rarely, not cached)."""
        return self._file(commit_sha, PROGRAM_MD)

    def _file(self, commit_sha: str, file_name: str) -> bytes:
        with self.lock:
            blob = next((binsha for binsha, _mode, name in self._tree(commit_sha) if name == file_name), None)
            if blob is None:
                raise UnknownCommit(commit_sha)
            return self._read(blob, _BLOB)

    def best(self, branch: str = BEST_BRANCH) -> str | None:
        """The commit a best branch points at (None: no such branch yet)."""
        with self.lock:
            ref = git.Reference(self.repo, f"refs/heads/{branch}")
            return ref.commit.hexsha if ref.is_valid() else None

    # Writing -----------------------------------------------------------------------------------

    def commit_candidate(self, base_sha: str, train_py: bytes, message: str, agent: str) -> str:
        """Write a commit on top of `base_sha` that replaces train.py; no ref points at it yet."""
        with self.lock:
            base_entries = self._tree(base_sha)
        new_blob = self._write_blob(train_py)
        entries = [(new_blob if name == TRAIN_PY else sha, mode, name) for sha, mode, name in base_entries]
        commit = self._write_commit(self._store_tree(entries), [base_sha], message, _agent_actor(agent))
        with self.lock:
            _remember(self._train_py, commit, train_py, self._cache_size)
        return commit

    # Changes between commits -------------------------------------------------------------------

    def moved(self, base_sha: str, own_sha: str, onto_sha: str) -> Moved:
        """The change from `base_sha` to `own_sha` applied to the train.py of `onto_sha`, with exact
        context (server/trainpy/patches.py; PatchError when it does not apply). Nothing is written."""
        base, own, onto = (self.train_py(sha).decode("utf-8") for sha in (base_sha, own_sha, onto_sha))
        return Moved(onto=onto, source=carry_over(base, own, onto))

    def cherry_pick(self, base_sha: str, own_sha: str, onto_sha: str, message: str, agent: str) -> Moved:
        """`git cherry-pick` for a change to train.py, without fuzz or merging: the change moved onto
        `onto_sha` and committed on it (no ref points at the commit yet). No commit is written when
        `onto_sha` already contains the change."""
        moved = self.moved(base_sha, own_sha, onto_sha)
        if not moved.changes:
            return moved
        return replace(moved, commit=self.commit_candidate(onto_sha, moved.source.encode(), message, agent))

    def _write_ref(self, path: str, commit_sha: str) -> None:
        # A Commit made from its id is not looked up, so writing the ref starts no git process.
        target = git.Commit(self.repo, bytes.fromhex(commit_sha))
        git.SymbolicReference(self.repo, path).set_reference(target)

    def set_experiment_ref(self, experiment_id: int, commit_sha: str) -> None:
        with self.lock:
            self._write_ref(f"{EXPERIMENT_REF_PREFIX}{experiment_id}", commit_sha)

    def delete_experiment_ref(self, experiment_id: int) -> None:
        with self.lock:
            ref = git.Reference(self.repo, f"{EXPERIMENT_REF_PREFIX}{experiment_id}")
            if ref.is_valid():
                git.Reference.delete(self.repo, ref.path)

    def set_best(self, commit_sha: str, branch: str = BEST_BRANCH) -> None:
        with self.lock:
            self._write_ref(f"refs/heads/{branch}", commit_sha)

    def delete_best(self, branch: str) -> None:
        """Remove a best branch (undoing a track that was not created)."""
        with self.lock:
            ref = git.Reference(self.repo, f"refs/heads/{branch}")
            if ref.is_valid():
                git.Reference.delete(self.repo, ref.path)

    def baseline(self, train_py: bytes, program_md: bytes, message: str) -> str:
        """A commit with no parent holding `train.py` and `program.md` (a new track's baseline);
        no ref points at it yet."""
        tree = self._store_tree(
            [
                (self._write_blob(train_py), _BLOB_MODE, TRAIN_PY),
                (self._write_blob(program_md), _BLOB_MODE, PROGRAM_MD),
            ]
        )
        return self._write_commit(tree, [], message, _SERVER_ACTOR)
