"""What the tests and the benchmarks both use: real processes of a project (a server and its
workers, `processes`), cheap candidate train.py files (`candidates`) and a throwaway PostgreSQL
cluster (`pg_scratch`). Not part of the product: nothing under server/, worker/, harness/,
client/ or cli/ imports it."""
