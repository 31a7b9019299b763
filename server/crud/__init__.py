"""Database reads and writes, one module per resource."""
