"""Decisions as pure functions: data in, verdict out; no database, no clock, no I/O."""
