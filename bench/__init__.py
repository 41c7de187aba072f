"""Benchmarks of kubeherd against the native DaemonSet controller (`make bench`)."""
