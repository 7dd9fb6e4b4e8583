"""The push receiver: signed webhooks (GitHub, GitLab, generic / S3 event notifications) start a source's sync."""
