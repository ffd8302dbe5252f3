"""Simulation: the event-driven engine, the run driver, how decisions become a schedule, summary metrics, tenants side by side."""
