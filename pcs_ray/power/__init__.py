"""Power: records, TSMVA models, power profiles and energy accounting (core tier)."""
