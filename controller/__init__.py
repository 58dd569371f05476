"""The metadata controller: Raft, log storage, records, control managers, admin API, daemons."""
