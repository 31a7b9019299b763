"""The libraries a score sandbox imports before its clock starts (harness.runner.preload): only the
harness's own list, whatever the (untrusted) train sandbox reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.runner import preload
from harness.runner.messages import MAX_LINE_BYTES, encode
from harness.runner.train_phase import TrainOutcome, handle

# What import_candidate requires of a train.py, as the train entry imports it.
ENTRY_POINTS = "\ndef build_model(ctx):\n    pass\n\n\ndef train(model, ctx):\n    pass\n"


def run_python(code: str, cwd: Path) -> str:
    """`code` in a fresh interpreter as the entries run (-I: no current folder on the path)."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd=cwd
    )
    return done.stdout.strip()


def test_the_train_side_reports_the_libraries_used_and_not_the_candidate(tmp_path: Path) -> None:
    """What importing train.py loaded, and what it imported that was loaded already (as torch's
    compiler is in the train entry), but not train.py itself nor what it never asked for."""
    (tmp_path / "train.py").write_text(
        "import colorsys\nimport json.tool\nfrom email import message\nimport fractions as f\nf.Fraction(1)\n"
        + ENTRY_POINTS
    )
    code = (
        "import sys\n"
        "import email.message, fractions, statistics\n"
        "from harness.runner import preload\n"
        "from harness.runner.sandboxed.entry_common import CANDIDATE_MODULE, import_candidate\n"
        "before = set(sys.modules)\n"
        "with preload.recording(CANDIDATE_MODULE) as asked:\n"
        f"    import_candidate({str(tmp_path / 'train.py')!r})\n"
        "print(' '.join(preload.reported(before, asked)), __import__ is preload.builtins.__import__)"
    )
    *reported, restored = run_python(code, tmp_path).split()
    assert {"colorsys", "json.tool", "email", "email.message"} <= set(reported)
    assert "train" not in reported and "statistics" not in reported
    assert "fractions" in reported  # asked for by train.py, though loaded before
    assert restored == "True"


def test_modules_train_py_reaches_as_attributes_are_reported(tmp_path: Path) -> None:
    """torch's compiler reached as an attribute of torch (loaded already in the train entry, so
    neither loaded nor imported by train.py), in a function too, is reported; a plain attribute and
    a name that is not a module are not."""
    source = (
        "import email\nimport json as j\n"
        "def f():\n    return email.message.Message, j.tool\n"
        "email.charset.ALIASES\nj.dumps\nvalue = 3\nvalue.real\n"
    )
    (tmp_path / "train.py").write_text(source + ENTRY_POINTS)
    code = (
        "import sys\n"
        "import email.message, email.charset, json.tool\n"
        "from harness.runner import preload\n"
        "from harness.runner.sandboxed.entry_common import import_candidate\n"
        "before = set(sys.modules)\n"
        f"module = import_candidate({str(tmp_path / 'train.py')!r})\n"
        f"asked = preload.reached(open({str(tmp_path / 'train.py')!r}, 'rb').read(), vars(module))\n"
        "print(' '.join(preload.reported(before, asked)))"
    )
    reported = run_python(code, tmp_path).split()
    assert sorted(reported) == ["email.charset", "email.message", "json.tool"]


def test_only_the_harness_list_is_imported(tmp_path: Path) -> None:
    """A name of the candidate's choosing is never imported untimed, a library's (tabnanny) no more
    than a file beside it or a harness module: only the harness's own list."""
    (tmp_path / "planted.py").write_text("print('PLANTED RAN')\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from harness.runner import preload\n"
        "count = preload.load(['planted', 'server.main', 'no_such_module', 'tabnanny', 'torch._dynamo'])\n"
        "names = ('planted', 'server.main', 'tabnanny', 'torch._dynamo')\n"
        "print(count, *(name in sys.modules for name in names))"
    )
    assert run_python(code, tmp_path) == "1 False False False True"


def test_a_report_only_chooses_among_the_harness_list() -> None:
    assert preload.chosen([]) == []
    assert preload.chosen(["colorsys", "torch", "torch.nn", "torch._dynamox"]) == []
    assert preload.chosen(["torch._dynamo.config"]) == ["torch._dynamo"]
    assert preload.chosen(["torch._inductor.config", "torch._dynamo"]) == list(preload.HARNESS_LIBRARIES)


@given(st.lists(st.text(max_size=300) | st.integers() | st.none(), max_size=50))
def test_reported_names_are_checked(value) -> None:
    names = preload.valid_names(value)
    assert all(isinstance(name, str) and preload.NAME.fullmatch(name) for name in names)
    assert all(len(name) <= preload.MAX_NAME_CHARS for name in names)


def test_the_report_fits_the_message_lines_and_the_harness_caps_it() -> None:
    names = [f"m{index}" for index in range(preload.MAX_NAMES + 500)]
    for some in (names, ["a" * preload.MAX_NAME_CHARS] * 500, ["a"] * 20_000):
        parts = list(preload.messages(some))
        assert [name for part in parts for name in part] == some
        assert all(len(encode("libraries", names=part)) < MAX_LINE_BYTES for part in parts)
    outcome = TrainOutcome()
    for part in preload.messages(names):
        handle({"ev": "libraries", "names": part}, 1.0, outcome)
    handle({"ev": "libraries", "names": "not a list"}, 1.0, outcome)
    assert outcome.libraries == names[: preload.MAX_NAMES]
