"""API I/O: the only package that talks to Kubernetes API servers."""
