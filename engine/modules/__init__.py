"""Modules: one model each, with its config, device, dtype and safetensors checkpoint."""
