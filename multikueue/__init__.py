"""multikueue: dispatch job-like custom objects from a Kueue manager cluster to worker clusters."""

__version__ = "0.1.0"
