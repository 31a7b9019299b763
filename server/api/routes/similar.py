"""Has this been tried? The experiments whose change resembles a proposed one (POST /similar); the
same for an existing experiment is GET /experiments/{id}/similar (routes/experiments.py)."""

from __future__ import annotations

from fastapi import APIRouter

from protocol.schemas import SimilarIn, SimilarOut
from server.api.deps import Ctx, Reader
from server.context import AppContext
from server.crud.similar import find_similar
from server.flows.submit import propose
from server.trainpy.research_repo import blob_sha

router = APIRouter(prefix="/similar", tags=["experiments"])


def _similar(ctx: AppContext, body: SimilarIn) -> SimilarOut:
    with ctx.db.read() as session:
        proposed = propose(ctx, session, body)
        blob = blob_sha(proposed.new_source.encode())
        return SimilarOut(experiment_id=None, similar=find_similar(session, proposed.change, blob))


@router.post(
    "",
    responses={
        401: {"description": "missing or unknown token"},
        404: {"description": "unknown base"},
        409: {"description": "the project has no baseline yet"},
        413: {"description": "patch or train.py over the size limit"},
        422: {"description": "invalid change (precise reason in `detail`), as POST /experiments says"},
    },
)
def similar_to_a_change(ctx: Ctx, _reader: Reader, body: SimilarIn) -> SimilarOut:
    """Before submitting: the experiments whose train.py is the same as the change's (`identical`),
    or whose change is the same or nearly the same, with their outcomes. Checked as a submission
    is, but nothing is stored or queued."""
    return _similar(ctx, body)
