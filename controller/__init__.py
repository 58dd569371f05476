"""The metadata controller: Raft, log storage, records, control managers, admin API, daemons."""

# The release (CHANGELOG.md says what each adds, and which metadata.version levels).
__version__ = "0.4.0"
