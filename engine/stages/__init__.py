"""Stages: typed pure steps over modules (ContextGen, AudioToVideo, SuperResolution,
DecodeAndPublish). Inputs and outputs are dataclasses; state is passed in and returned.
Inputs have a batch dimension, one row per session, so sessions at the same step of their
schedules share one forward of each model."""
