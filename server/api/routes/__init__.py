"""API routers; `server.main` includes every module listed in ROUTERS."""

ROUTERS = ["experiments", "notes", "worker", "project", "events", "tsv", "ops", "similar"]
ROUTERS += ["history"]  # near misses and keep rates (issue 16)
