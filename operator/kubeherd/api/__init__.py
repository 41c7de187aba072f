"""The kubeherd.io API: pydantic models, and the CRDs generated from them."""
