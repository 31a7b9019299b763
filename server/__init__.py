"""The autoresearch FastAPI service."""
