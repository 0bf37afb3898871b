"""dynmig package."""
