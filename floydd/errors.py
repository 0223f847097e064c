"""Every error floydd raises on purpose; one root, the tree drawn here.

    FloyddError                      code, message, hint; never shown as a traceback
    ├── UserError                    the request is wrong; fixing it is up to the caller (HTTP 400)
    │   ├── InvalidName              a dataset/project/job name that does not validate
    │   ├── InvalidSpec              malformed --data, --param, empty command, ...
    │   ├── UnsafePath               traversal, absolute paths, special files, links leaving a tree
    │   ├── TooLarge                 an upload past the box's size limit (max_upload_gb, max_code_mb) (413)
    │   └── TooMany                  past a per-person limit, e.g. jobs queued (max_queued_per_person) (429)
    ├── Unauthorized                 no or a wrong API token on TCP (401)
    ├── Forbidden                    known caller, not allowed to do this (a box speaking for another,
    │                                a user stopping someone else's job) (403)
    ├── NotFound                     a dataset, version, job, project or object that does not exist (404)
    ├── Conflict                     already exists / immutable / in use / daemon already running (409)
    ├── StoreError                   the store itself
    │   ├── IntegrityError           an object failed authentication or re-hashing (damaged, tampered)
    │   │   └── Untrusted            a file that must not be read as data, or as "no data", until
    │   │                            repaired (floydd repair): the daemon refuses to start (409)
    │   └── StoreFull                no space left while writing (507)
    ├── Unavailable                  transient: daemon or peer not reachable, try again (503)
    └── InternalError                a bug; still reported as JSON with a hint to file an issue (500)

Transient errors (``Unavailable``) may be retried; everything else is permanent
for the same input. Messages say what went wrong, hints say what to do.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FloyddError",
    "UserError",
    "InvalidName",
    "InvalidSpec",
    "UnsafePath",
    "TooLarge",
    "TooMany",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "StoreError",
    "IntegrityError",
    "Untrusted",
    "StoreFull",
    "Unavailable",
    "InternalError",
    "from_payload",
]


class FloyddError(Exception):
    """Root of every deliberate floydd error."""

    code = "error"
    status = 500

    def __init__(self, message: str, *, hint: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code

    def to_payload(self) -> dict[str, Any]:
        """The JSON body the API answers with: ``{"error": {...}}``."""
        return {"error": {"code": self.code, "message": self.message, "hint": self.hint,
                          "kind": type(self).__name__}}

    def __str__(self) -> str:
        return self.message


class UserError(FloyddError):
    code = "bad_request"
    status = 400


class InvalidName(UserError):
    code = "invalid_name"


class InvalidSpec(UserError):
    code = "invalid_spec"


class UnsafePath(UserError):
    code = "unsafe_path"


class TooLarge(UserError):
    code = "too_large"
    status = 413


class TooMany(UserError):
    code = "too_many"
    status = 429


class Unauthorized(FloyddError):
    code = "unauthorized"
    status = 401


class Forbidden(FloyddError):
    code = "forbidden"
    status = 403


class NotFound(FloyddError):
    code = "not_found"
    status = 404


class Conflict(FloyddError):
    code = "conflict"
    status = 409


class StoreError(FloyddError):
    code = "store_error"
    status = 500


class IntegrityError(StoreError):
    code = "integrity_error"


class Untrusted(IntegrityError):
    code = "untrusted_state"
    status = 409


class StoreFull(StoreError):
    code = "store_full"
    status = 507


class Unavailable(FloyddError):
    code = "unavailable"
    status = 503


class InternalError(FloyddError):
    code = "internal_error"
    status = 500


_BY_NAME = {cls.__name__: cls for cls in (
    FloyddError, UserError, InvalidName, InvalidSpec, UnsafePath, TooLarge, TooMany, Unauthorized, Forbidden,
    NotFound, Conflict, StoreError, IntegrityError, Untrusted, StoreFull, Unavailable, InternalError)}


def from_payload(payload: dict[str, Any], status: int = 500) -> FloyddError:
    """Rebuild the error a daemon answered with (used by :mod:`floydd.client`)."""
    err = payload.get("error", {}) if isinstance(payload, dict) else {}
    cls = _BY_NAME.get(str(err.get("kind", "")), FloyddError)
    exc = cls(str(err.get("message", f"daemon answered HTTP {status}")),
              hint=str(err.get("hint", "")), code=err.get("code"))
    exc.status = status
    return exc
