"""Schemathesis against the OpenAPI spec: no server errors and no schema violations on any input.

Runs over real HTTP against a live server that has history (see `seeded_live`), so generated
ids and bodies reach real code paths. GET /events is left out: it is an endless stream (see
test_events_and_ops.py). Schema-valid requests may still be refused with a 4xx (a patch that
does not apply is valid JSON), so the "positive data acceptance" check is off. Few examples per
operation keep the run within about two minutes. Operations are driven with Hypothesis directly
(schemathesis's pytest plugin does not support this pytest version).
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.schemas import APIOperation

EXAMPLES_PER_OPERATION = 25


def _fuzz(operation: APIOperation, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

    run()


def test_no_server_errors_and_answers_match_the_schema(seeded_live) -> None:  # type: ignore[no-untyped-def]
    live, tokens = seeded_live
    schema = schemathesis.openapi.from_url(f"{live.url}/api/v1/openapi.json")
    schema = schema.include(path_regex="^/api/v1/").exclude(path="/api/v1/events")
    failures: dict[str, str] = {}
    tested = 0
    for found in schema.get_all_operations():
        operation = found.ok()
        path = operation.path
        kind = (
            "worker" if path.startswith("/worker/") else "admin" if path.startswith("/import/") else "agent"
        )
        try:
            _fuzz(operation, {"Authorization": f"Bearer {tokens[kind]}"})
        except BaseException as exc:  # collect every operation's failure, then report them together
            failures[operation.label] = f"{type(exc).__name__}: {exc}"[:3000]
        tested += 1
    assert tested >= 20
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
