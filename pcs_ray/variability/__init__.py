"""How GPUs and runs differ: PAL's Longhorn records, per-GPU profiles and binning, run-to-run replay, slow-run prediction."""
