"""Stages: typed, pure steps over modules (ContextGen, AudioToVideo, SuperResolution,
DecodeAndPublish). Inputs and outputs are dataclasses; state is passed in and returned."""
