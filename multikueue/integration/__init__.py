"""A kind made queueable by Kueue from configuration alone: suspended on create, a Workload, run on admission."""
