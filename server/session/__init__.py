"""One avatar session and its parts, the manager that holds them all, and the only link to the engine."""
