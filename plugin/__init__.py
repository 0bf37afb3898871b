"""plugin package."""
