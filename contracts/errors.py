"""The error every contract, job and exporter setting raises when it cannot work."""


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the flag, variable or field."""
