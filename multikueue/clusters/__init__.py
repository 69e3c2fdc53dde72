"""Worker clusters: kubeconfig checks, connections with backoff, and the Active conditions."""
