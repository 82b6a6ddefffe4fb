"""Task-worker assignment by exact projection onto a three-view cardinality constrained set.

See docs/methods/assignment.md.
"""
