"""The baseline `train.py` and `program.md` that `autoresearch init` copies into a new research repo.

A package so that a wheel ships both files (server/project_init.py reads them from here). `train.py`
is candidate code like any other: the harness never imports it, it only runs it in the sandbox.
"""
