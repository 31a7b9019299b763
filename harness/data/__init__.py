"""Data sources, text shards and token files: everything between raw text and packed rows."""
