"""Properties of the random agent's mutation of train.py constants (hypothesis)."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.mutation import NoConstantsError, mutate_constants
from protocol.constants import find_constants

upper_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,11}", fullmatch=True).filter(
    lambda name: name not in {"True", "False", "None"}
)
lower_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: name not in {"def", "if", "in", "is", "or", "as", "for", "not", "and", "del", "try"}
)
comments = st.text(alphabet="abc é€😀 #=", max_size=12).map(lambda text: f"  # {text}")
nonzero_ints = st.integers(min_value=-(10**12), max_value=10**12).filter(lambda value: value != 0)
floats = st.floats(min_value=-1e250, max_value=1e250, allow_nan=False, allow_infinity=False).filter(
    lambda value: value != 0.0
)
unit_floats = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True)


@st.composite
def constant_values(draw: st.DrawFn) -> str:
    """The right-hand side text of a mutable constant, in the spellings train.py files use."""
    kind = draw(st.sampled_from(["int", "float", "unit", "power", "product", "negative"]))
    if kind == "int":
        return str(draw(nonzero_ints))
    if kind == "float":
        return repr(draw(floats))
    if kind == "unit":
        return repr(draw(unit_floats))
    if kind == "power":
        return f"2**{draw(st.integers(0, 40))}"
    if kind == "product":
        return f"{draw(st.integers(1, 100))} * {draw(st.integers(1, 2**20))}"
    return f"-{abs(draw(floats))!r}"


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["constant", "annotated", "lower", "string", "tuple", "zero", "function"]))
    comment = draw(st.one_of(st.just(""), comments))
    if kind == "constant":
        return f"{draw(upper_names)} = {draw(constant_values())}{comment}"
    if kind == "annotated":
        return f"{draw(upper_names)}: float = {draw(constant_values())}{comment}"
    if kind == "lower":
        return f"{draw(lower_names)} = {draw(constant_values())}{comment}"
    if kind == "string":
        return f'{draw(upper_names)} = "{draw(st.integers())}"{comment}'
    if kind == "tuple":
        return f"{draw(upper_names)} = (0.9, {draw(st.integers())}){comment}"
    if kind == "zero":
        return f"{draw(upper_names)} = 0{comment}"
    return f"def {draw(lower_names)}():\n    {draw(upper_names)} = {draw(constant_values())}\n"


@st.composite
def train_sources(draw: st.DrawFn) -> str:
    """A module with at least one mutable constant among statements that must not change."""
    body = draw(st.lists(statements(), max_size=8))
    constant = f"{draw(upper_names)} = {draw(constant_values())}"
    body.insert(draw(st.integers(0, len(body))), constant)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return '"""A train.py with é in its docstring."""\n' + newline.join(body) + newline


def _values(node: ast.expr) -> list[int | float]:
    """The numbers an assignment sets: one, or a tuple's elements (each a knob of its own)."""
    value = eval(compile(ast.Expression(node), "<constant>", "eval"))  # constant arithmetic only
    return list(value) if isinstance(value, tuple) else [value]


def _assigned(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
        return stmt.target.id, stmt.value
    return None


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@settings(max_examples=300, deadline=None)
@given(source=train_sources(), seed=st.integers(0, 2**32))
def test_mutation_changes_only_top_level_upper_case_constants(source: str, seed: int) -> None:
    new_source, description = mutate_constants(source, random.Random(seed))

    old_body = ast.parse(source).body
    new_body = ast.parse(new_source).body  # the result still parses
    assert len(new_body) == len(old_body)
    changed: list[str] = []
    for old, new in zip(old_body, new_body, strict=True):
        if ast.dump(old) == ast.dump(new):
            continue
        old_assigned, new_assigned = _assigned(old), _assigned(new)
        assert old_assigned is not None and new_assigned is not None, "only assignments may change"
        name, old_node = old_assigned
        new_name, new_node = new_assigned
        assert name == new_name and name.isupper(), "only UPPER_CASE constants may change"
        moved = [(a, b) for a, b in zip(_values(old_node), _values(new_node), strict=True) if a != b]
        assert moved
        for old_value, new_value in moved:
            assert type(new_value) is type(old_value), "ints stay ints and floats stay floats"
            assert (new_value > 0) == (old_value > 0), "the sign is kept"
            if isinstance(old_value, int) and _is_power_of_two(old_value):
                assert _is_power_of_two(new_value), "powers of two stay powers of two"
                assert new_value in (old_value * 2, old_value // 2), "and move one step"
            if isinstance(old_value, float) and 0 < old_value < 1:
                assert 0 < new_value < 1, "fractions stay fractions"
            changed.append(name)
        assert name in description
    assert 1 <= len(changed) <= 2, "something changes, one or two constants at a time"


@settings(max_examples=100, deadline=None)
@given(source=train_sources(), seed=st.integers(0, 2**32))
def test_mutation_keeps_every_other_line_byte_for_byte(source: str, seed: int) -> None:
    new_source, _ = mutate_constants(source, random.Random(seed))
    old_lines, new_lines = source.splitlines(keepends=True), new_source.splitlines(keepends=True)
    assert len(old_lines) == len(new_lines)
    differing = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert 1 <= len(differing) <= 2
    for index in differing:
        before, after = old_lines[index], new_lines[index]
        assert before.split("=")[0] == after.split("=")[0], "the name and annotation stay"
        assert "#" not in before or before[before.index("#") :] == after[after.index("#") :]


@given(source=train_sources(), seed=st.integers(0, 2**32))
def test_same_seed_gives_same_mutation(source: str, seed: int) -> None:
    assert mutate_constants(source, random.Random(seed)) == mutate_constants(source, random.Random(seed))


def test_mutations_explore_both_directions() -> None:
    original = {"DEPTH": 8, "LR": 0.04, "WIDTH": 300}
    source = "".join(f"{name} = {value}\n" for name, value in original.items())
    rng = random.Random(7)
    directions: dict[str, set[bool]] = {name: set() for name in original}
    for _ in range(200):
        new_source, _ = mutate_constants(source, rng)
        for constant in find_constants(new_source):
            if constant.value != original[constant.name]:
                directions[constant.name].add(constant.value > original[constant.name])
    assert all(seen == {True, False} for seen in directions.values())


def test_large_ints_keep_three_significant_digits() -> None:
    source = "TOKENS = 40 * 524288\n"
    for seed in range(20):
        new_source, _ = mutate_constants(source, random.Random(seed))
        (constant,) = find_constants(new_source)
        assert isinstance(constant.value, int)
        assert len(str(constant.value).rstrip("0")) <= 3


def test_power_spelling_is_kept() -> None:
    new_source, description = mutate_constants("TOTAL_BATCH_SIZE = 2**19\n", random.Random(0))
    assert new_source in ("TOTAL_BATCH_SIZE = 2**18\n", "TOTAL_BATCH_SIZE = 2**20\n")
    assert description == f"TOTAL_BATCH_SIZE 2**19 -> {new_source.split('= ')[1].strip()}"


def test_nothing_to_mutate_is_a_clear_error() -> None:
    source = "x = 3\nNAME = 'gpt'\nOFF = 0\nFLAG = True\ndef f():\n    LR = 0.1\n"
    with pytest.raises(NoConstantsError, match="no top-level UPPER_CASE numeric constant"):
        mutate_constants(source, random.Random(0))


def test_unparsable_source_raises_syntax_error() -> None:
    with pytest.raises(SyntaxError):
        mutate_constants("LR = = 3\n", random.Random(0))


def test_the_real_baseline_has_constants_to_mutate_and_stays_valid() -> None:
    baseline = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
    names = {constant.name for constant in find_constants(baseline)}
    assert {"MATRIX_LR", "EMBEDDING_LR", "WARMDOWN_FRACTION"} <= names
    rng = random.Random(0)
    for _ in range(50):
        new_source, description = mutate_constants(baseline, rng)
        compile(new_source, "train.py", "exec")
        changed = description.split(", ")
        assert 1 <= len(changed) <= 2 and all(change.split()[0] in names for change in changed)
