"""Simulated units platform: a deterministic event-log generator with exact ground truth
(`scenario`), and the events route serving it on loopback with fault injection (`route`)."""
