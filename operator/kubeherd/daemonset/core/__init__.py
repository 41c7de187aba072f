"""The CustomDaemonSet controller's pure core: plain data in, plain data out, with no API
client, no Kopf and no event loop (the "pure" contract of import-linter holds it)."""
