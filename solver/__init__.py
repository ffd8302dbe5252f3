"""pcs-ray solver package."""
