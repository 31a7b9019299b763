"""The built-in corpus: the standard library's source, split and held out deterministically."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.data.builtin import EXCLUDED_DIRS, corpus_documents, split_source, stdlib_files, stdlib_root


def test_corpus_is_the_portable_part_of_the_standard_library() -> None:
    root = stdlib_root()
    assert root == Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    relative = [f.relative_to(root) for f in files]
    assert Path("json/decoder.py") in relative and Path("os.py") in relative
    assert not [p for p in relative if EXCLUDED_DIRS.intersection(p.parts[:-1])]
    assert not [p for p in relative if p.name.startswith("_sysconfigdata")]
    train, val = corpus_documents(root)
    size = sum(len(doc.encode()) for doc in train + val)
    assert size > 9_500_000  # about 10 MB of text
    assert 0.05 < len(val) / (len(train) + len(val)) < 0.25
    val_files = {doc.splitlines()[0] for doc in val}
    assert not val_files & {doc.splitlines()[0] for doc in train}  # whole files are held out


def test_corpus_is_deterministic() -> None:
    assert corpus_documents(stdlib_root()) == corpus_documents(stdlib_root())


LINES = ["def f():\n", "    return 1\n", "\n", "x = 2\n", "    def g(self):\n"]


@given(st.lists(st.sampled_from(LINES), max_size=400))
def test_splitting_keeps_every_line_in_order(lines: list[str]) -> None:
    text = "".join(lines)
    docs = split_source("pkg/mod.py", text, target_chars=40)
    assert all(doc.startswith("# pkg/mod.py\n") for doc in docs)
    rejoined = "".join(doc.removeprefix("# pkg/mod.py\n") for doc in docs)
    assert rejoined.strip() == text.strip() or not text.strip()
