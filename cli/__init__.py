"""The `autoresearch` command line."""
