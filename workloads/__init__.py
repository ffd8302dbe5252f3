"""pcs-ray workloads package."""
