"""Watch: the metadata log's committed changes, decoded, streamed to outside readers."""
