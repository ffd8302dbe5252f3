"""pcs-ray executors package."""
