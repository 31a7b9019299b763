"""The words the server, the worker, the harness and agents share: the REST models (schemas),
states and decisions, event types, a run's result format, train.py's constants.
Imports nothing of this repository: everything else may import it."""
