"""``AdminClient``: a synchronous client of the Admin service (the CLI's engine):
one typed method per Admin RPC over ``AdminTransport`` (client_transport.py: how the
controller is found, what is retried, the stream), whose errors it re-exports."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import grpc

from controller.api.client_transport import (
    DEFAULT_TIMEOUT_MS,
    AdminClientError,
    AdminTransport,
    ControllerOverloadedError,
    ControllerUnreachableError,
    OutcomeUnknownError,
    RequestFailedError,
    parse_bootstrap,
)
from controller.api.rpcs import ADMIN_RPCS_BY_NAME
from controller.api.seam import (
    Args,
    ClusterDescription,
    NodeDescription,
    QuorumDescription,
    TransferOutcome,
    VoterChangeOutcome,
)
from controller.metadata import (
    AlterConfigsResource,
    AlterConfigsResult,
    ApiError,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    DescribeConfigsResult,
    ElectionType,
    ElectLeadersResult,
    ErrorCode,
    FeatureDescription,
    FeatureUpdate,
    FeatureUpdateResult,
    OngoingReassignment,
    ReassignmentRequest,
    ReassignmentResult,
    TopicDescription,
    TopicListing,
    TopicPartition,
)
from controller.security.acl import AclBinding, AclFilter

# Every Admin RPC's row, by name (what `AdminTransport.call` takes).
_RPC = ADMIN_RPCS_BY_NAME
# Leadership transfers tried when another controller wins the election a hand-over
# started (`transfer_leadership`).
_TRANSFER_ATTEMPTS = 3


class AdminClient(AdminTransport):
    def create_topics(self, topics: Sequence[CreatableTopic], *, validate_only: bool = False
                      ) -> tuple[CreateTopicResult, ...]:
        answer: tuple[CreateTopicResult, ...] = self.call(
            _RPC["CreateTopics"], Args(tuple(topics), validate_only))
        return answer

    def delete_topics(self, names: Sequence[str], if_mod_offsets: Mapping[str, int] | None = None
                      ) -> tuple[DeleteTopicResult, ...]:
        """`if_mod_offsets`: delete a topic named there only if its mod offset is that."""
        answer: tuple[DeleteTopicResult, ...] = self.call(
            _RPC["DeleteTopics"], Args(tuple(names), extra=dict(if_mod_offsets or {}) or None))
        return answer

    def create_partitions(self, topics: Sequence[CreatePartitionsTopic], *,
                          validate_only: bool = False) -> tuple[CreatePartitionsResult, ...]:
        answer: tuple[CreatePartitionsResult, ...] = self.call(
            _RPC["CreatePartitions"], Args(tuple(topics), validate_only))
        return answer

    def list_topics(self) -> tuple[TopicListing, ...]:
        answer: tuple[TopicListing, ...] = self.call(_RPC["ListTopics"], Args())
        return answer

    def describe_topics(self, names: Sequence[str] | None = None) -> tuple[TopicDescription, ...]:
        """``None`` (or empty): every topic."""
        answer: tuple[TopicDescription, ...] = self.call(
            _RPC["DescribeTopics"], Args(tuple(names or ()) or None))
        return answer

    def describe_cluster(self) -> ClusterDescription:
        answer: ClusterDescription = self.call(_RPC["DescribeCluster"], Args())
        return answer

    def incremental_alter_configs(self, resources: Sequence[AlterConfigsResource], *,
                                  validate_only: bool = False) -> tuple[AlterConfigsResult, ...]:
        answer: tuple[AlterConfigsResult, ...] = self.call(
            _RPC["IncrementalAlterConfigs"], Args(tuple(resources), validate_only))
        return answer

    def describe_configs(self, resources: Sequence[ConfigResource]
                         ) -> tuple[DescribeConfigsResult, ...]:
        answer: tuple[DescribeConfigsResult, ...] = self.call(
            _RPC["DescribeConfigs"], Args(tuple(resources)))
        return answer

    def alter_partition_reassignments(self, items: Sequence[ReassignmentRequest]
                                      ) -> tuple[ReassignmentResult, ...]:
        answer: tuple[ReassignmentResult, ...] = self.call(
            _RPC["AlterPartitionReassignments"], Args(tuple(items)))
        return answer

    def list_partition_reassignments(self, partitions: Sequence[TopicPartition] | None = None
                                     ) -> tuple[OngoingReassignment, ...]:
        answer: tuple[OngoingReassignment, ...] = self.call(_RPC["ListPartitionReassignments"],
                         Args(tuple(partitions or ()) or None))
        return answer

    def elect_leaders(self, partitions: Sequence[TopicPartition] | None,
                      election_type: ElectionType = ElectionType.PREFERRED
                      ) -> tuple[ElectLeadersResult, ...]:
        """``None``: every partition that needs an election."""
        items = None if partitions is None else tuple(partitions)
        answer: tuple[ElectLeadersResult, ...] = self.call(
            _RPC["ElectLeaders"], Args(items, extra=election_type))
        return answer

    def unregister_broker(self, broker_id: int) -> ApiError:
        answer: ApiError = self.call(_RPC["UnregisterBroker"], Args((broker_id,)))
        return answer

    def describe_quorum(self) -> QuorumDescription:
        answer: QuorumDescription = self.call(_RPC["DescribeQuorum"], Args())
        return answer

    def add_raft_voter(self, node_id: int, directory_id: str, endpoint: str, *,
                       validate_only: bool = False) -> VoterChangeOutcome:
        """Make a started controller (fetching as an observer) a voter; the leader waits
        while it catches up, then until the change commits (within this client's
        timeout)."""
        return self._voter_change("AddRaftVoter", node_id, directory_id, endpoint,
                                  validate_only)

    def remove_raft_voter(self, node_id: int, directory_id: str, *,
                          validate_only: bool = False) -> VoterChangeOutcome:
        return self._voter_change("RemoveRaftVoter", node_id, directory_id, "", validate_only)

    def update_raft_voter(self, node_id: int, directory_id: str, endpoint: str, *,
                          validate_only: bool = False) -> VoterChangeOutcome:
        return self._voter_change("UpdateRaftVoter", node_id, directory_id, endpoint,
                                  validate_only)

    def _voter_change(self, name: str, node_id: int, directory_id: str, endpoint: str,
                      validate_only: bool) -> VoterChangeOutcome:
        args = Args(validate_only=validate_only, extra=(node_id, directory_id, endpoint,
                                                        self._voter_change_timeout_ms()))
        answer: VoterChangeOutcome = self.call(
            _RPC[name], args, attempt_timeout_ms=self._timeout_ms)
        return answer

    def transfer_leadership(self, target_id: int) -> TransferOutcome:
        """Hand the quorum's leadership to voter `target_id`; answered once it leads
        (or the hand-over failed: the error says, and nothing was lost). When another
        controller won the election the hand-over started (a race a loaded machine
        can lose), it is asked again of the new leader, a few times while time is
        left."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        for attempt in range(_TRANSFER_ATTEMPTS):
            args = Args(extra=(target_id, self._voter_change_timeout_ms()))
            answer: TransferOutcome = self.call(_RPC["TransferLeadership"], args,
                                                attempt_timeout_ms=self._timeout_ms)
            lost_race = (answer.error.code is ErrorCode.REQUEST_TIMED_OUT
                         and answer.leader_id not in (-1, target_id))
            if not lost_race or attempt + 1 == _TRANSFER_ATTEMPTS \
                    or time.monotonic() + 1.0 > deadline:
                return answer
        raise AssertionError("unreachable")

    def describe_node(self) -> NodeDescription:
        """The state of the controller this client reaches first (its first bootstrap
        address, if up): a question to that controller, never redirected."""
        answer: NodeDescription = self.call(_RPC["DescribeNode"], Args())
        return answer

    def _voter_change_timeout_ms(self) -> int:
        # The server answers a little before the client gives up, so the client gets
        # its verdict rather than a deadline.
        return max(1, self._timeout_ms - min(1000, self._timeout_ms // 5))

    def describe_features(self) -> tuple[FeatureDescription, ...]:
        answer: tuple[FeatureDescription, ...] = self.call(_RPC["DescribeFeatures"], Args())
        return answer

    def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool = False
                        ) -> tuple[FeatureUpdateResult, ...]:
        answer: tuple[FeatureUpdateResult, ...] = self.call(
            _RPC["UpdateFeatures"], Args(tuple(updates), validate_only))
        return answer

    def create_acls(self, bindings: Sequence[AclBinding]) -> tuple[ApiError, ...]:
        results = self.call(_RPC["CreateAcls"], Args(tuple(bindings)))
        return tuple(r.error for r in results)

    def describe_acls(self, acl_filter: AclFilter) -> tuple[AclBinding, ...]:
        """The bindings `acl_filter` matches; RequestFailedError for a bad filter."""
        found = self.call(_RPC["DescribeAcls"], Args(extra=acl_filter))
        if not found.error.ok:
            raise RequestFailedError(grpc.StatusCode.INVALID_ARGUMENT, str(found.error))
        return tuple(found.bindings)

    def delete_acls(self, filters: Sequence[AclFilter]
                    ) -> tuple[tuple[ApiError, tuple[AclBinding, ...]], ...]:
        """Per filter: its error and the bindings it matched and deleted."""
        results = self.call(_RPC["DeleteAcls"], Args(tuple(filters)))
        return tuple((r.error, r.deleted) for r in results)


# The transport's errors and helpers are part of this module's interface.
__all__ = ["DEFAULT_TIMEOUT_MS", "AdminClient", "AdminClientError", "ControllerOverloadedError",
           "ControllerUnreachableError", "OutcomeUnknownError", "RequestFailedError",
           "parse_bootstrap"]
