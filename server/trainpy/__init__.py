"""The train.py text tools: patches, edits, outlines, what a change set, the research repo."""
