"""Benchmarks that print ratios against the competitors in one run (see kernels.py)."""
