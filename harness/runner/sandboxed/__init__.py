"""The code that runs inside a sandbox, beside the candidate's train.py: untrusted by construction.

Each entry (`python -m harness.runner.sandboxed.train_entry`, `...model_entry`) is harness code
until it imports train.py; from then on everything in its process, this code included, is the
candidate's to change. So nothing here decides anything the harness trusts: what it reports after
candidate code ran is checked or ignored on the trusted side (harness.runner.messages,
harness.runner.train_phase.handle, harness.runner.scoring). What it does BEFORE candidate code is
the exception, and each such act says so where it happens: its first `ready`, the compile cache's
folder handed over, the machine's speed at `go`, the seccomp filter of a score process.

It may import the modules shared by both sides (harness.runner.messages, limits, preload,
conditions, cuda_handover, compile_cache) and nothing of the orchestration or the scorer.
"""
