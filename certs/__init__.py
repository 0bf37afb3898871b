"""certs package."""
