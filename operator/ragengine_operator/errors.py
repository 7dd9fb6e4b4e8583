"""Errors that say what happens next: InvalidSpec is permanent (fix the spec), ApplyFailed retries."""


class InvalidSpec(Exception):
    """The spec fails the typed model: reported as Degraded/InvalidSpec, not retried until it changes."""


class ApplyFailed(Exception):
    """The API server refused a child object: reported as Degraded/ApplyFailed and retried."""
