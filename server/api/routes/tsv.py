"""results.tsv export and import (autoresearch's 5-column log)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from protocol.schemas import ImportOut
from server.api.deps import Admin, Ctx, Reader, Responses
from server.api.params import TrackQuery
from server.core.problems import Problem
from server.crud import tsv
from server.crud.tracks import named_or_only

router = APIRouter(tags=["results.tsv"])
_TRACK: Responses = {
    404: {"description": "no such track"},
    422: {"description": "no track named where there are several"},
}
MAX_IMPORT_BYTES = 20_000_000
# What `tsv.parse` accepts, as a schema can say it (a little stricter: one number format).
_NUMBER = r"[0-9]{1,6}(\.[0-9]{1,6})?"
_DESCRIPTION = r"[^\u0000-\u001f\u007f-\u009f\u2028\u2029]{0,500}"  # no line break of str.splitlines
_ROW = rf"[0-9a-f]{{4,40}}\t{_NUMBER}\t{_NUMBER}\t({'|'.join(tsv.TSV_STATUSES)})\t{_DESCRIPTION}"
_TSV_PATTERN = "^" + tsv.HEADER.replace("\t", r"\t") + rf"(\n{_ROW})*\n?$"


class TsvResponse(PlainTextResponse):
    media_type = "text/tab-separated-values"


@router.get("/results.tsv", response_class=TsvResponse, responses=_TRACK)
def export_tsv(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> TsvResponse:
    """Every result of a track so far (imported history first): commit, val_bpb, memory_gb, status,
    description, then each decision's runs, effect, effect_se, best_runs and p_value."""
    with ctx.db.read() as session:
        rows = tsv.export_rows(session, named_or_only(session, track).id)
        lines = [tsv.HEADER_WITH_DECISIONS, *(row.line_with_decision() for row in rows)]
    return TsvResponse("\n".join(lines) + "\n")


@router.post(
    "/import/results.tsv",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"text/tab-separated-values": {"schema": {"type": "string", "pattern": _TSV_PATTERN}}},
        }
    },
    responses={
        401: {"description": "no token"},
        403: {"description": "not an admin"},
        404: {"description": "no such track"},
        422: {"description": "bad TSV, or no track named where there are several"},
    },
)
async def import_tsv(ctx: Ctx, _admin: Admin, request: Request, track: TrackQuery = None) -> ImportOut:
    """Bring a results.tsv in as a track's history (never compared with the best). Admin only."""
    body = await request.body()
    if len(body) > MAX_IMPORT_BYTES:
        raise Problem(413, "tsv-too-large", f"the file is {len(body)} bytes; the limit is {MAX_IMPORT_BYTES}")
    try:
        rows = tsv.parse(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Problem(422, "tsv-not-utf8", "results.tsv must be UTF-8 text") from exc
    except tsv.TsvError as exc:
        raise Problem(422, "tsv-invalid", str(exc)) from exc
    return await run_in_threadpool(_store, ctx, rows, track)


def _store(ctx: Ctx, rows: list[tsv.TsvRow], track: str | None) -> ImportOut:
    with ctx.transaction() as tx:
        imported, skipped = tsv.import_rows(tx.session, rows, named_or_only(tx.session, track).id)
    return ImportOut(imported=imported, skipped=skipped)
