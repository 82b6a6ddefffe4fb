"""Seeded synthetic instances with their ground truth, one module per job.

Used by the tests (recovery against the truth that generated the data), the benchmarks (the papers'
experiments) and the demo data. Import the job's module: ``from crowdflow.synth import skills as synth``.
"""
