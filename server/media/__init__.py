"""Media in and out of a session: the aiortc peer and tracks, microphone intake, playout, recording."""
