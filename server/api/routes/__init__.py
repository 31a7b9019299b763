"""The API's routers, one module per resource; server/api/router.py lists them in order."""
