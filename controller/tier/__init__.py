"""The remote tier of the metadata log (KIP-405 applied to the Raft log).

- `remote`: the storage seam (`RemoteStorage`) and its directory and S3 tiers;
- `objects`: object names, manifests and their checks;
- `history`: tier + local log read as one sequence of offsets;
- `retention`: the local and remote retention rules (pure);
- `copier`: the controller's task that copies, cleans up and trims;
- `config`, `metrics`: the `[tier]` section and the Prometheus metrics.
The remote-object state machine itself is a control manager like the others
(`controller.metadata.tier`), replayed from the metadata log.
"""
