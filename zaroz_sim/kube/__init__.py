"""The Kubernetes API emulator: the real wire protocol for UnitSignals, with faults."""
