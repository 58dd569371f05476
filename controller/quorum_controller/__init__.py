"""The single-threaded quorum controller (issue 5).

- `controller.QuorumController`: events on the Raft node task, the write path
  (generate, replay, append, purgatory), leadership (standby, pending, active,
  revert), commit replay, snapshot loading, timers; `events` its small values;
- `purgatory`: answers waiting for their batch to commit (exact outcomes);
- `facade.ControllerApi`: the `controller.api.seam.ControllerFacade` that the gRPC
  services call; `ports`: what the controller needs of Raft, and its settings;
- `snapshots`: snapshot files written in steps from the timeline, then compaction;
- `metrics`: Prometheus metrics; `logs`: one structured line per event;
- `config_file` and `daemon`: the `metakraft controller --config FILE` process.
"""
