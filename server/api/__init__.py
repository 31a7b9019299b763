"""The HTTP API under /api/v1: dependencies (auth) and one router module per resource."""
