"""The agent's voice: TTS, speech intake and queue, barge-in VAD, interrupt muting, playback events."""
