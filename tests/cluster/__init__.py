"""A package like client/ and e2e/ (whose package-scoped clusters end with their directory, not the session)."""
