"""The single-threaded quorum controller.

- `machine.ControllerMachine`: the controller as a state machine without I/O
  (requests with ids in, `Answer` / `Fail` out; the write path: generate, replay,
  append, purgatory; leadership: standby, pending, active, revert; commit replay,
  snapshot loading, timers); `events` its values and the mode transition table;
- `controller.QuorumController`: its asyncio driver on the Raft node task (futures,
  turns, timers, snapshot files, metrics);
- `purgatory`: answers waiting for their batch to commit (exact outcomes);
- `facade.ControllerApi`: the `controller.api.seam.ControllerFacade` that the gRPC
  services call; `ports`: what the controller needs of Raft, and its settings;
- `snapshots`: snapshot files written in steps from the timeline, then compaction;
- `metrics`: Prometheus metrics; `logs`: one structured line per event;
- `config_file` and `daemon`: the `metakraft controller --config FILE` process.
"""
