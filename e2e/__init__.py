"""End-to-end suite and its providers (see README.md)."""
