"""The shapes of the ``/v1`` API's JSON answers, as frozen dataclasses.

``/v1/openapi.json`` draws its response schemas from these types (with
``msgspec.json.schema_components``, as it draws the request bodies from
:mod:`floydd.model`), and the contract test converts real answers and the TUI's
test double with ``msgspec.convert(answer, Type)``, so the published spec, the
daemon and the double cannot drift apart unnoticed.

The rule for each field:

- **required**: what the CLI or the TUI reads (a renamed or removed field must fail,
  even where a reader falls back with ``.get``, since it would then draw ``-`` silently),
  and the ids other answers refer to (a node's ``id``, a part's ``node_id``);
- **optional**, with a default: what the daemon sends only sometimes (a distributed
  job's ``parts``, a job's ``events`` on ``GET /v1/jobs/{project}/{number}``) or what no
  reader relies on.

Unknown fields are allowed (msgspec ignores them for dataclasses), so the daemon may add
fields without breaking a client. Values with a closed set (job states, node health) are
``Literal`` types: a new one must reach the TUI's styles before the daemon sends it.

One module per part of the API (``nodes``, ``jobs``, ``cluster``, ``datasets``, ``exchange``,
``errors``; the closed sets in ``literals``); every type is imported from here.
"""

from __future__ import annotations

from floydd.api.schemas.literals import Health, JobState, MemberRole, NodeRole, Point, Role, Visibility
from floydd.api.schemas.nodes import Info, Gpu, Node
from floydd.api.schemas.jobs import (ResourcesView, MetricView, PartView, EventView, RestartView, JobView, SystemSample,
                                     Metrics, LastBest, CompareRow, Compare, CodeUpload, JobCheck)
from floydd.api.schemas.cluster import (Member, Cluster, Person, PersonRemoved, ApiToken, WhoAmI, JoinToken,
                                        TokenRecord, Left, Drained, Removed, AuditEntry, AuditCheck, AuditHead,
                                        StoreEpoch, StoreKeyReport, StoreKeyRotated)
from floydd.api.schemas.datasets import DatasetVersion, DatasetEntry, DatasetInfo, DatasetDeleted, GcReport
from floydd.api.schemas.exchange import ExportOrigin, ImportedJob, ImportedDataset, ImportResult
from floydd.api.schemas.errors import ErrorDetail, Error
from floydd.api.schemas.trust import LabBox, RevokedCert, CaInfo

__all__ = ["Health", "JobState", "MemberRole", "NodeRole", "Point", "Role", "Visibility", "Info", "Gpu",
           "Node", "ResourcesView", "MetricView", "PartView", "EventView", "RestartView", "JobView", "SystemSample",
           "Metrics", "LastBest", "CompareRow", "Compare", "CodeUpload", "JobCheck", "Member", "Cluster", "Person",
           "PersonRemoved", "ApiToken", "WhoAmI", "JoinToken", "TokenRecord", "Left", "Drained", "Removed",
           "StoreEpoch", "StoreKeyReport", "StoreKeyRotated",
           "AuditEntry", "AuditCheck", "AuditHead", "DatasetVersion", "DatasetEntry", "DatasetInfo", "DatasetDeleted",
           "GcReport", "ExportOrigin", "ImportedJob", "ImportedDataset", "ImportResult", "ErrorDetail",
           "Error"]
__all__ += ["LabBox", "RevokedCert", "CaInfo"]
