"""Unified diffs of train.py: what is accepted, what is refused and why, and exact application."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.trainpy.patches import PatchError, apply_patch, make_patch, parse_patch, split_lines

OLD = "".join(f"line {i}\n" for i in range(1, 21))
lines_strategy = st.lists(st.sampled_from(["a", "b", "c", "", "x = 1", "    pass", "# c"]), max_size=25)


def texts() -> st.SearchStrategy[str]:
    """Files made of a few repeated lines (so that context is ambiguous), with or without a final newline."""
    return st.builds(
        lambda lines, end: "\n".join(lines) + (end if lines else ""),
        lines_strategy,
        st.sampled_from(["\n", ""]),
    )


@given(old=texts(), new=texts())
@settings(max_examples=300)
def test_make_then_apply_reproduces_the_new_file(old: str, new: str) -> None:
    if old == new:
        return
    assert apply_patch(old, parse_patch(make_patch(old, new))) == new


@given(old=texts(), new=texts())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_git_apply_agrees_with_our_patches(tmp_path: Path, old: str, new: str) -> None:
    """Our diffs are real unified diffs: `git apply` turns old into new with them too."""
    if old == new:
        return
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(old)
    (work / "p.diff").write_text(make_patch(old, new))
    subprocess.run(["git", "apply", "p.diff"], cwd=work, check=True, capture_output=True)
    assert (work / "train.py").read_text() == new


def test_git_diff_output_is_accepted(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "train.py").write_text(OLD)
    subprocess.run(["git", "add", "train.py"], cwd=repo, check=True)
    new = OLD.replace("line 7\n", "line seven\n").replace("line 18\n", "")
    (repo / "train.py").write_text(new)
    diff = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    assert diff.startswith("diff --git a/train.py b/train.py\nindex ")
    assert apply_patch(OLD, parse_patch(diff)) == new


def test_hunks_apply_at_an_offset_like_git() -> None:
    patch = make_patch(OLD, OLD.replace("line 10\n", "line ten\n"))
    shifted = "new first line\nanother\n" + OLD
    assert apply_patch(shifted, parse_patch(patch)) == shifted.replace("line 10\n", "line ten\n")


def test_no_newline_at_end_of_file_round_trips() -> None:
    old, new = "a\nb", "a\nc"
    patch = make_patch(old, new)
    assert "\\ No newline at end of file" in patch
    assert apply_patch(old, parse_patch(patch)) == new


def test_split_lines_only_splits_on_newline() -> None:
    assert split_lines("a\rb\x0cc\nd") == ["a\rb\x0cc\n", "d"]


GOOD_HEADER = "--- a/train.py\n+++ b/train.py\n"
HUNK = "@@ -1,1 +1,1 @@\n-line 1\n+line one\n"


@pytest.mark.parametrize(
    ("patch", "kind", "words"),
    [
        ("--- a/model.py\n+++ b/model.py\n" + HUNK, "patch-path", "only train.py"),
        ("--- a/train.py\n+++ b/other.py\n" + HUNK, "patch-path", "only train.py"),
        ("--- a/../train.py\n+++ b/../train.py\n" + HUNK, "patch-path", "outside the repo"),
        ("--- /etc/passwd\n+++ /etc/passwd\n" + HUNK, "patch-path", "outside the repo"),
        ("--- /dev/null\n+++ b/train.py\n" + HUNK, "patch-creates-or-deletes", "/dev/null"),
        ("--- a/train.py\n+++ /dev/null\n" + HUNK, "patch-creates-or-deletes", "/dev/null"),
        ("diff --git a/train.py b/train.py\nold mode 100644\nnew mode 100755\n", "patch-forbidden", "mode"),
        (
            "diff --git a/train.py b/run.py\nsimilarity index 90%\nrename from train.py\n",
            "patch-path",
            "only train.py",
        ),
        (
            "diff --git a/train.py b/train.py\nrename from train.py\nrename to train.py\n",
            "patch-forbidden",
            "rename",
        ),
        ("diff --git a/train.py b/train.py\nnew file mode 100644\n", "patch-forbidden", "creates"),
        ("diff --git a/train.py b/train.py\nGIT binary patch\nliteral 5\n", "patch-forbidden", "binary"),
        (
            "diff --git a/train.py b/train.py\nBinary files a/train.py and b/train.py differ\n",
            "patch-forbidden",
            "binary",
        ),
        (GOOD_HEADER + "@@ -1,1 +1,1 @@\n-line 1\n+x\0y\n", "patch-binary", "NUL"),
        (GOOD_HEADER + HUNK + GOOD_HEADER + HUNK, "patch-multiple-files", "second file"),
        ("just some text\n", "patch-malformed", "no ---/+++"),
        (GOOD_HEADER, "empty-change", "no hunks"),
        (GOOD_HEADER + "@@ -1,2 +1,2 @@\n-line 1\n+line one\n", "patch-malformed", "ends early"),
        (GOOD_HEADER + "@@ -1 +1 @@ x\n-line 1\n+line one\n+extra\n", "patch-malformed", "outside a hunk"),
        (GOOD_HEADER + "@@ garbage @@\n", "patch-malformed", "malformed hunk header"),
        ("@@ -1 +1 @@\n-line 1\n+line one\n", "patch-malformed", "before the ---/+++"),
        (
            GOOD_HEADER + "@@ -1,1 +1,1 @@\n-line 1\n\\ Something else\n+x\n",
            "patch-malformed",
            "unknown marker",
        ),
    ],
)
def test_refused_patches_say_why(patch: str, kind: str, words: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_patch(OLD, parse_patch(patch))
    assert caught.value.kind == kind
    assert words in caught.value.detail


def test_a_patch_whose_context_is_missing_does_not_apply() -> None:
    patch = make_patch("alpha\nbeta\n", "alpha\ngamma\n")
    with pytest.raises(PatchError) as caught:
        apply_patch(OLD, parse_patch(patch))
    assert caught.value.kind == "patch-does-not-apply"
    assert "hunk 1" in caught.value.detail


def test_a_hunk_whose_header_counts_too_few_lines_says_so() -> None:
    """The common hand-made mistake (issue 29): the message names the hunk and its header."""
    with pytest.raises(PatchError) as caught:
        parse_patch(GOOD_HEADER + "@@ -1 +1 @@\n-line 1\n+line one\n+extra\n")
    assert caught.value.detail == (
        "line 6: unexpected line '+extra' outside a hunk; hunk 1's header '@@ -1 +1 @@' counts fewer "
        "lines than follow it: correct its counts, or make the patch with `git diff` or `diff -u`"
    )
    with pytest.raises(PatchError) as caught:  # text after a blank line is not taken for the hunk's
        parse_patch(GOOD_HEADER + "@@ -1 +1 @@\n-line 1\n+line one\n\n+extra\n")
    assert caught.value.detail == "line 7: unexpected line '+extra' outside a hunk"


def test_hunks_apply_in_order_and_never_overlap() -> None:
    """A second hunk may not match text before the end of the first one (git's rule too)."""
    old = "x\ny\nx\ny\n"
    hunks = parse_patch(GOOD_HEADER + "@@ -3,2 +3,2 @@\n x\n-y\n+Y\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n")
    with pytest.raises(PatchError):
        apply_patch("x\ny\n", hunks)
    assert apply_patch(old, hunks[:1]) == "x\ny\nx\nY\n"
