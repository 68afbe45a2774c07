"""What every function shares: observability, the environment models and the event models."""
