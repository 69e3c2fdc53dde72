"""The domain: Kueue's MultiKueue state machine, direct mode, the per-kind adapter and its offline check."""
