"""The engine as a service: worker processes that each serve many avatar sessions on one device."""
