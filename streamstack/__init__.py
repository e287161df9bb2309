"""streamstack: the local runtime and command-line interface of the streaming platform."""
