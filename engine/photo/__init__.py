"""Photo avatars: a photograph warped to copy the motion of the face the engine generates."""
