"""What a change touches (server/trainpy/changes.py), on the real baseline and the random agent's real
mutations, and as properties of any pair of sources."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agent.mutation import mutate_constants
from harness.runner.devices import platform_device
from protocol.constants import counts_on, find_constants, knob_device
from server.trainpy.changes import MODULE, ConstantChange, summarize

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()


def test_a_mutation_of_the_baseline_is_summarized_as_the_constants_it_set() -> None:
    rng = random.Random(3)
    for _ in range(30):
        new, description = mutate_constants(BASELINE, rng)
        summary = summarize(BASELINE, new)
        # description: "NAME old -> new[, NAME old -> new]"
        described = {part.split()[0] for part in description.split(", ")}
        assert {change.name for change in summary.constants} == described
        assert summary.parsed and summary.regions == (MODULE,)
        # One line each, unless both knobs sit on one line (a device's settings).
        assert 1 <= len(summary.removed) == len(summary.added) <= len(described)
        for change in summary.constants:
            assert change.old is not None and change.new is not None and change.old != change.new


def test_knobs_are_named_by_their_path_and_each_device_is_its_own() -> None:
    source = (
        "SETTINGS = {\n"
        '    "cuda": Settings(depth=8, width=2**9, bf16=True, **extra),\n'
        '    "cpu": {"depth": 2, "sizes": {0: 4 * 256}, "name": "small"},\n'
        "}\n"
        "OPTIMIZER = Adam(lr=3e-4, betas=(0.9, 0.95))\n"
        "lower = dict(width=5)\n"
    )
    found = {c.name: (c.value, source[c.start : c.end], c.power_form) for c in find_constants(source)}
    assert found == {
        'SETTINGS["cuda"].depth': (8, "8", False),
        'SETTINGS["cuda"].width': (512, "2**9", True),
        'SETTINGS["cpu"]["depth"]': (2, "2", False),
        'SETTINGS["cpu"]["sizes"][0]': (1024, "4 * 256", False),
        "OPTIMIZER.lr": (3e-4, "3e-4", False),
        "OPTIMIZER.betas[0]": (0.9, "0.9", False),  # each number of a tuple is a knob
        "OPTIMIZER.betas[1]": (0.95, "0.95", False),
    }  # no booleans, strings, **kwargs or lower-case names
    wider = BASELINE.replace("depth=2, width=128", "depth=2, width=192")
    assert summarize(BASELINE, wider).constants == (ConstantChange('DEVICE_SETTINGS["cpu"].width', 128, 192),)
    both = wider.replace("depth=8, width=512", "depth=8, width=768")
    assert {c.name for c in summarize(BASELINE, both).constants} == {
        'DEVICE_SETTINGS["cpu"].width',
        'DEVICE_SETTINGS["cuda"].width',
    }


def test_a_knob_counts_on_its_own_device_and_a_plain_constant_everywhere() -> None:
    """On the real baseline: its per-device settings select a device, its other constants none;
    a platform named as workers name theirs (harness.runner.devices) is of one device type."""
    names = {c.name: knob_device(c.name) for c in find_constants(BASELINE)}
    assert names['DEVICE_SETTINGS["cuda"].width'] == "cuda" and names['DEVICE_SETTINGS["cpu"].depth'] == "cpu"
    assert all((device is not None) == name.startswith("DEVICE_SETTINGS[") for name, device in names.items())
    assert names["MATRIX_LR"] is None and names["WARMDOWN_FRACTION"] is None
    assert knob_device('LAYERS[0]["cpu"].width') == "cpu" and knob_device('NAMES["gpu"]') is None
    for name, device in names.items():
        assert counts_on(name, None)  # no platform yet: everything counts
        assert counts_on(name, "cpu") == (device in (None, "cpu"))
        assert counts_on(name, "cuda") == (device in (None, "cuda"))
    assert platform_device("cpu (Intel(R) Xeon(R) Platinum 8481C)") == platform_device("cpu") == "cpu"
    assert platform_device("NVIDIA H100 80GB HBM3") == platform_device("NVIDIA H200") == "cuda"
    assert platform_device(None) is None


def test_a_changed_function_body_is_its_region_and_its_lines() -> None:
    base = (
        "LR = 0.1\n\n"
        "def train(x):\n    y = x * 2\n    return y\n\n"
        "class GPT:\n    @staticmethod\n    def forward(x):\n        return x\n"
    )
    new = base.replace("    y = x * 2", "    y = x * 3").replace("        return x\n", "        return  -x\n")
    summary = summarize(base, new)
    assert summary.constants == ()
    assert summary.regions == ("GPT.forward", "train")
    assert summary.removed == ("y = x * 2", "return x")
    assert summary.added == ("y = x * 3", "return -x")


def test_the_same_value_spelled_otherwise_is_no_constant_change_but_a_new_one_is() -> None:
    summary = summarize("BATCH = 2**19\nLR = 0.1\n", "BATCH = 524288\nLR = 0.1\nWD = 0.0\n")
    assert summary.constants == (ConstantChange("WD", None, 0.0),)
    gone = summarize("LR = 0.1\nWD = 0.1\n", "LR = 0.1\n")
    assert gone.constants == (ConstantChange("WD", 0.1, None),)


def test_reindenting_and_blank_lines_are_no_change() -> None:
    summary = summarize("def f():\n    return 1\n", "def f():\n\n    return   1\n")
    assert summary.empty and summary.regions == ()


def test_a_source_that_does_not_parse_has_lines_but_no_constants_or_regions() -> None:
    summary = summarize("LR = 0.1\n", "LR = = 0.2\n")
    assert not summary.parsed
    assert summary.constants == () and summary.regions == ()
    assert summary.removed == ("LR = 0.1",) and summary.added == ("LR = = 0.2",)


def test_line_numbers_follow_pythons_line_ends() -> None:
    # A form feed is a line break for str.splitlines but not for Python: the region must not slip.
    base = "A = 1\x0c\r\ndef f():\r\n    return 1\r\n"
    summary = summarize(base, base.replace("return 1", "return 2"))
    assert summary.regions == ("f",)


sources = st.lists(
    st.sampled_from(
        ["LR = 0.1", "LR = 0.2", "DEPTH = 8", "def f():", "    return 1", "    return 2", "", "x = 3"]
    ),
    max_size=8,
).map(lambda lines: "\n".join(lines) + "\n")


def _counts(source: str) -> Counter[str]:
    return Counter(" ".join(line.split()) for line in source.splitlines() if line.strip())


@given(sources, sources)
def test_the_lines_turn_one_source_into_the_other_and_constants_mirror(a: str, b: str) -> None:
    forward, back = summarize(a, b), summarize(b, a)
    for summary, source, target in ((forward, a, b), (back, b, a)):
        assert _counts(source) - Counter(summary.removed) + Counter(summary.added) == _counts(target)
    assert forward.parsed == back.parsed
    mirrored = {(change.name, change.new, change.old) for change in back.constants}
    assert {(change.name, change.old, change.new) for change in forward.constants} == mirrored
    assert summarize(a, a).empty


def test_constant_lines_are_told_from_code_by_their_assignment() -> None:
    summary = summarize("LR = 0.1\nLRX = 2\n", "LR: float = 0.2\nLRX = 3\n")
    assert summary.code == ()
    summary = summarize("LR = 0.1\nif LR == 0.1:\n    pass\n", "LR = 0.2\nif LR == 0.2:\n    pass\n")
    assert summary.code == ("-if LR == 0.1:", "+if LR == 0.2:")
