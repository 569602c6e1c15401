"""A package, so its package-scoped fixtures (shared clusters) end with it rather than with the session."""
