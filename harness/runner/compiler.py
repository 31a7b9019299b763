"""torch's compiler, loaded in a score sandbox before its clock starts when train.py needs it.

Loading torch's compiler (torch._dynamo, and what torch.compile sets up when first called) costs
more CPU than all else an honest model does before its first answer on a CPU (docs/runner.md, "The
bound"), and an honest train.py may load it at import: a compiler setting, a function decorated
with torch.compile. It is library code, not the candidate's work. So the train sandbox reports
whether importing train.py and build_model loaded it (`loaded`, in its `training` phase message),
and if so each model process loads it on the scorer's command (`load`) before `go`, where no
candidate code has run yet, and the score phase's startup allowance can stay small. The report is
the candidate's and may be false: a false "yes" costs the scorer an untimed load and gains nothing.
"""

from __future__ import annotations

import sys

MODULE = "torch._dynamo"


def loaded() -> bool:
    return MODULE in sys.modules


def load() -> None:
    """What importing torch._dynamo and decorating a function with torch.compile load."""
    import torch
    import torch._dynamo

    torch.compile(lambda x: x)  # a wrapper only: nothing is compiled until it is called
