"""Inconsistent option values (data given by bundled name or by path is ``pcs_ray.data.locate``)."""


class UsageError(ValueError):
    """Inconsistent or out-of-range options."""
