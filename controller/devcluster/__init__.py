"""`metakraft dev`: a real local cluster (controllers and brokers as processes on
loopback) for people to try and for scripts to drive.

- `ports`: free loopback ports (bind-and-release);
- `layout`: the nodes (ids, ports), the per-node folders, `cluster.json`, and
  `plan_cluster` (first run or resume);
- `configs`: each node's TOML config and formatted data dir;
- `supervisor`: start, watch (a death is reported, never hidden by a restart) and
  stop (brokers first, then controllers) the child processes;
- `probe`: health checks, AdminClient reads, the broker status RPC;
- `session`: one run (data-dir lock, signals, bounded waits, bind-conflict retry);
- `runner`: the `metakraft dev` flow and its output; `scenario`: the `--scenario`
  tour.

The dev cluster composes both sides (controllers and broker agents) as the CLI
does; it imports the broker agent only lazily, in `probe.broker_status`.
"""
