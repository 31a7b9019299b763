"""The trusted scorer: the process that holds the validation targets and computes val_bpb.

`python -m harness.runner.scoring.scorer` runs outside any sandbox, started by the runner. It trusts
its own inputs (the validation rows, the training tokens for the probe's variants, its settings
from the runner) and nothing from the model sandboxes it starts (harness.runner.scoring.model_process):
their logits are copied and checked, their timing is measured from outside (score_budget), their
predictions are compared with a fresh process's (score_plan, agreement).

It imports the shared modules and never a sandboxed entry's.
"""
