"""Generation: one engine interface (engine.py) and what is built on it (cache, teacher
sampling, rejection by verifiers, pass-rate filtering). Orchestrator-free, like every library."""
