"""Benchmarks (not tests): python -m bench.run, python -m bench.report."""
