"""The only code that talks to the API server (besides kopf itself)."""
