"""The control managers and the metadata state they generate records for.

Managers (``cluster``, ``replication``, ``configs``, ``features``) only *generate*:
they read the latest state and return a ``ControllerResult(records, response)``,
changing nothing durable. ``MetadataState.replay(record, offset)`` is the only
mutator. All durable state lives in timeline structures registered with one
``SnapshotRegistry`` (``MetadataState.registry``); heartbeat times are soft state
outside it. No I/O, clock or randomness is imported here: ``now_ms`` and a
``RandomSource`` come in as parameters.
"""

from controller.metadata.acls import (
    AclControlManager,
    AclEntry,
    CreateAclResult,
    DeleteAclsResult,
    DescribeAclsResult,
)
from controller.metadata.cluster import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ClusterControlManager,
)
from controller.metadata.config_schema import CONFIG_KEYS, ConfigType, ResourceType
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConfigurationControlManager,
    DescribeConfigsResult,
    OpType,
)
from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
)
from controller.metadata.features import (
    METADATA_VERSION,
    FeatureControlManager,
    FeatureDescription,
    FeatureUpdate,
    FeatureUpdateResult,
    UpgradeType,
)
from controller.metadata.levels import LATEST_METADATA_VERSION
from controller.metadata.placement import RandomSource, place_replicas
from controller.metadata.replication import ReplicationControlManager
from controller.metadata.state import MetadataImage, MetadataState, TopicImage
from controller.metadata.topics import (
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    ElectLeadersResult,
    OngoingReassignment,
    PartitionDescription,
    ReassignmentRequest,
    ReassignmentResult,
    TopicDescription,
    TopicListing,
    TopicPartition,
)

__all__ = [
    "CONFIG_KEYS",
    "LATEST_METADATA_VERSION",
    "METADATA_VERSION",
    "OK",
    "AclControlManager",
    "AclEntry",
    "AlterConfigOp",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "ApiError",
    "BrokerHeartbeatReply",
    "BrokerHeartbeatRequest",
    "BrokerRegistrationReply",
    "BrokerRegistrationRequest",
    "ClusterControlManager",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConfigType",
    "ConfigurationControlManager",
    "ControllerResult",
    "CreatableTopic",
    "CreateAclResult",
    "CreatePartitionsResult",
    "CreatePartitionsTopic",
    "CreateTopicResult",
    "DeleteAclsResult",
    "DeleteTopicResult",
    "DescribeAclsResult",
    "DescribeConfigsResult",
    "ElectLeadersResult",
    "ElectionType",
    "ErrorCode",
    "FeatureControlManager",
    "FeatureDescription",
    "FeatureUpdate",
    "FeatureUpdateResult",
    "MetadataImage",
    "MetadataReplayError",
    "MetadataState",
    "OngoingReassignment",
    "OpType",
    "PartitionDescription",
    "RandomSource",
    "ReassignmentRequest",
    "ReassignmentResult",
    "ReplicationControlManager",
    "ResourceType",
    "TopicDescription",
    "TopicImage",
    "TopicListing",
    "TopicPartition",
    "UpgradeType",
    "place_replicas",
]
