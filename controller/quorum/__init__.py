"""The Raft driver side: everything that does I/O around the sans-I/O core.

- `raft_service.proto` (+ generated code): the Raft gRPC service between nodes;
  `wire`: core messages <-> protobuf (batches travel as stored bytes).
- `log_adapter`: `SegmentedLog` + leader-epoch checkpoint + snapshot files as the
  core's `RaftLog` / `SnapshotStore`.
- `driver`: `RaftDriver`, one `RaftNode` on asyncio + grpc.aio over a data dir;
  `driver_config` (timeouts and bounds), `service` (the gRPC handlers and reply
  matching), `peers` (calls to other nodes), `proposals` (commit or loss of
  proposals).
- TEST HARNESS ONLY: `harness.proto`, `harness`, `node_main`: a bare quorum node
  for tests and bench/raft_bench.py.
"""
