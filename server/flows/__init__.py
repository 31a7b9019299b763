"""What a request or a background task does, above persistence.

A flow opens the transaction, takes the locks in the order server/flows/submit.py gives, reads and
writes rows through server/crud (which calls nothing above it), asks the rules (server/flows/decisions,
server/rules/judge) for verdicts, changes states through server/rules/lifecycle and emits the events. Routes
and background tasks call flows.
"""
