"""The findings' lifecycle in the monitor: fingerprints and transitions, and the probe rotation (pure)."""
