"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class StreamstackError(Exception):
    """A problem the user can act on; its message is shown as is, without a traceback."""
