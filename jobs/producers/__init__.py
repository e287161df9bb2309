"""Synthetic event producers that feed the jobs locally and in demos."""
