"""Search/replace edits alone (server/trainpy/edits.py): applied in order, each naming exactly one place;
with hypothesis, that an edit of a unique span is the splice it says."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from protocol.schemas import Edit
from server.trainpy.edits import EditError, apply_edits

# Text as the API lets it in (protocol.schemas refuses NUL characters, and JSON carries no lone
# surrogates, before any edit is applied).
TEXT = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
SOURCE = "DEPTH = 4\nWIDTH = 256\n\ndef train(model, ctx):\n    lr = 0.01\n    return lr\n"


def test_edits_apply_in_order_to_the_text_the_ones_before_left() -> None:
    edits = [Edit(old="DEPTH = 4", new="DEPTH = 6"), Edit(old="DEPTH = 6\n", new="DEPTH = 8\n")]
    assert apply_edits(SOURCE, edits) == SOURCE.replace("DEPTH = 4", "DEPTH = 8")
    assert apply_edits(SOURCE, [Edit(old="    lr = 0.01\n", new="")]) == SOURCE.replace("    lr = 0.01\n", "")


def test_an_edit_that_names_no_place_or_several_says_which_and_why() -> None:
    with pytest.raises(EditError) as missing:
        apply_edits(SOURCE, [Edit(old="DEPTH = 4", new="DEPTH = 5"), Edit(old="DEPTH = 4", new="x")])
    assert missing.value.kind == "edit-not-found" and missing.value.detail.startswith("edit 2:")
    assert "'DEPTH = 4'" in missing.value.detail
    with pytest.raises(EditError) as several:
        apply_edits(SOURCE, [Edit(old=" = ", new="=")])
    assert several.value.kind == "edit-ambiguous" and "occurs 3 times" in several.value.detail
    with pytest.raises(EditError) as long:
        apply_edits(SOURCE, [Edit(old="y" * 500, new="")])
    assert "y" * 120 + "...'" in long.value.detail and "y" * 121 not in long.value.detail


@given(
    st.text(TEXT, max_size=200),
    st.text(TEXT, min_size=1, max_size=20),
    st.text(TEXT, max_size=20),
    st.text(TEXT, max_size=200),
)
def test_an_edit_of_a_unique_span_is_that_splice(before: str, old: str, new: str, after: str) -> None:
    text = before + old + after
    assume(text.count(old) == 1)
    assert apply_edits(text, [Edit(old=old, new=new)]) == before + new + after


@given(st.text(TEXT, max_size=200), st.text(TEXT, min_size=1, max_size=5))
def test_an_edit_applies_exactly_when_its_old_occurs_once(text: str, old: str) -> None:
    count = text.count(old)
    try:
        apply_edits(text, [Edit(old=old, new="")])
    except EditError as error:
        assert error.kind == ("edit-not-found" if count == 0 else "edit-ambiguous") and count != 1
    else:
        assert count == 1
