"""API routers; `server.main` includes every module listed in ROUTERS."""

ROUTERS = ["experiments", "worker", "project", "events", "tsv", "ops"]
