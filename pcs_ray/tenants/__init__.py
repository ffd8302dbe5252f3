"""Who shares the cluster: the tenants file (quotas, borrowing, minimum runtime), who calls, and who may do what."""
