"""Training the bundled model on procedural talking-head data (``avatar train``)."""
