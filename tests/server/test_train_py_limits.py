"""server/trainpy/limits.py: the rule a train.py must pass, each limit alone and their order."""

from __future__ import annotations

from pathlib import Path

from server.core.config import ServerSettings
from server.trainpy.limits import Limits, refusal

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
CODE = "def f(x):\n    return g(x)\n" * 40  # 1,040 bytes, compresses to a few dozen
COMMENTS = "# a long comment line that is not code at all\n" * 4  # 188 bytes of comments


def test_the_baseline_passes_the_default_limits() -> None:
    assert refusal(BASELINE, ServerSettings().train_py_limits) is None


def test_each_limit_refuses_alone_naming_itself() -> None:
    loose = Limits(max_bytes=10_000, max_data_bytes=10_000, max_information_bytes=10_000)
    assert refusal(CODE + COMMENTS, loose) is None
    too_large = refusal(CODE, Limits(999, 10_000, 10_000))
    assert too_large is not None and (too_large.status, too_large.kind) == (413, "train-py-too-large")
    assert too_large.detail == "train.py is 1040 bytes; the limit is 999"
    data = refusal(CODE + COMMENTS, Limits(10_000, 100, 10_000))
    assert data is not None and (data.status, data.kind) == (422, "train-py-carries-data")
    assert "TRAIN_PY_MAX_DATA_BYTES" in data.detail and "lines 81-84" in data.detail
    held = refusal(CODE + COMMENTS, Limits(10_000, 10_000, 40))
    assert held is not None and (held.status, held.kind) == (422, "train-py-carries-data")
    assert "TRAIN_PY_MAX_INFORMATION_BYTES" in held.detail


def test_the_size_is_checked_first_then_literals_then_information() -> None:
    # Over all three: the cheapest check answers, and the answer does not depend on the others.
    over_all = refusal(CODE + COMMENTS, Limits(100, 10, 10))
    over_two = refusal(CODE + COMMENTS, Limits(10_000, 10, 10))
    assert over_all is not None and over_all.kind == "train-py-too-large"
    assert over_two is not None and "TRAIN_PY_MAX_DATA_BYTES" in over_two.detail
