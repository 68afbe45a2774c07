"""The monitor's functions: the EventBridge event handler and the findings-stream notifier."""
