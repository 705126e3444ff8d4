"""The box layer: run commands, read and write files, manage servers and probes on a box."""
