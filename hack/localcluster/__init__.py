"""The local control plane kubeherd's tests and demos run against (see cluster.py)."""
