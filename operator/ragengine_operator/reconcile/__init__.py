"""Pure planning (spec -> objects) and status computation (observed children -> conditions)."""
