"""The one exception users catch for bad or undecodable data."""


class DyncompressError(Exception):
    """Data that cannot be decoded exactly: not a .dc stream, corrupt, truncated,
    written with settings this machine cannot reproduce, or a decode that diverged.
    The message is one line, meant for the user."""
