"""Controller runtime: informers, caches and a keyed work queue. Knows nothing of the dispatch domain."""
