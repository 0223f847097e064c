"""What a box tells laptops for the box they pin (``GET /v1/ca`` as JSON, :mod:`floydd.api.boxtrust`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LabBox", "RevokedCert", "CaInfo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LabBox:
    """A current member of the lab: its node id (what a laptop pins) and name."""

    id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RevokedCert:
    """A certificate the lab revoked (a removed box's): its serial (lowercase hex) and node id."""

    serial: str
    node: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CaInfo:
    """``GET /v1/ca`` with ``Accept: application/json``: the cluster CA (PEM), the box that
    answered (``node``), the lab's members and revoked certificates, and their digest
    (``trust``, what the ``Floydd-Trust`` header of authenticated answers carries)."""

    ca: str
    fingerprint: str
    node: str
    members: list[LabBox]
    revoked: list[RevokedCert]
    trust: str
