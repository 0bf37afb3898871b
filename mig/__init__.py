"""mig package."""
