"""The data plane's refusal: a wire code (data.proto's DataError) and a message."""

from __future__ import annotations


class DataPlaneError(Exception):
    """A refusal with its wire code (data.proto's DataError); nothing was changed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
