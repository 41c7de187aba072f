"""The CustomDaemonSet controller's I/O shell: the watches and their stores, what a pass reads
from the API server, the writes it sends, and the state kept of each object between passes."""
