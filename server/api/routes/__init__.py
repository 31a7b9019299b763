"""API routers; `server.main` includes every module listed in ROUTERS."""

ROUTERS = ["experiments", "notes", "worker", "project", "events", "tsv", "ops", "similar"]
