"""Errors: one exception class per server error code (docs/protocol.md, "Error codes") under
``SmdbError``, plus
the client-side failures (lost connection, malformed frames, a lagged subscription)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

# The tables below follow the protocol crate's (protocol/src/codes.rs); tests/test_errors.py
# checks them against its generated vector, protocol/testdata/error_codes.json.

#: Codes the server marks retryable. ``SYNC_TIMEOUT`` is not one (the write committed), nor is
#: ``WAL_IO_ERROR`` (the log is poisoned until a restart). Cluster mode (docs/cluster.md) adds
#: ``TRYAGAIN`` (a slot frozen by a move) and ``CLUSTERDOWN``; ``MOVED`` is not retryable (the
#: request goes to ``details.addr``).
RETRYABLE = frozenset(
    {
        "RATE_LIMITED", "SHUTTING_DOWN", "CONNECTION_LIMIT", "NO_PRIMARY", "STORAGE_FULL",
        "INTERNAL_ERROR", "TRYAGAIN", "CLUSTERDOWN",
    }
)
#: Retryable codes that mean the server refused the request before executing it (safe to
#: resend any request); ``NO_PRIMARY`` only without ``details.maybe_committed``.
NOT_EXECUTED = frozenset(
    {
        "SHUTTING_DOWN", "RATE_LIMITED", "CONNECTION_LIMIT", "NO_PRIMARY", "STORAGE_FULL",
        "TRYAGAIN", "CLUSTERDOWN",
    }
)


class SmdbError(Exception):
    """Base of every error this package raises."""


class ServerError(SmdbError):
    """The server answered ``status: "error"``. Subclasses, one per code, are in ``BY_CODE``."""

    code: str = "UNKNOWN"

    def __init__(
        self,
        message: str = "",
        *,
        code: Optional[str] = None,
        retryable: Optional[bool] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message
        self.retryable = self.code in RETRYABLE if retryable is None else retryable
        self.details: Dict[str, Any] = details or {}
        super().__init__(f"{self.code}: {message}")


class ConnectionLost(SmdbError, ConnectionError):
    """The connection failed or was closed; a request in flight may or may not have run."""


class ProtocolError(ConnectionLost):
    """The peer sent bytes that are not an RCP1 frame or a JSON message (the connection is
    unusable)."""


class SubscriptionLagged(SmdbError):
    """The subscription fell too far behind and the server ended it. Iterating on resumes from
    ``resume_cursor``; it can also be passed to ``watch_all(from_cursor=...)``."""

    def __init__(self, subscription_id: Any, resume_cursor: str) -> None:
        self.subscription_id = subscription_id
        self.resume_cursor = resume_cursor
        super().__init__(f"subscription {subscription_id} lagged; resume from cursor {resume_cursor}")


_CODES = [
    "HELLO_REQUIRED", "UNSUPPORTED_PROTOCOL", "BAD_REQUEST", "UNKNOWN_OPERATION", "INVALID_FRAME",
    "CHECKSUM_MISMATCH", "FRAME_TOO_LARGE", "UNAUTHORIZED", "AUTH_FAILED", "MACHINE_NOT_FOUND",
    "MACHINE_VERSION_EXISTS", "INVALID_DEFINITION", "INSTANCE_NOT_FOUND", "INSTANCE_EXISTS",
    "INVALID_TRANSITION", "GUARD_FAILED", "CONFLICT", "READ_ONLY_MODE", "SYNC_TIMEOUT",
    "CONNECTION_LIMIT", "RATE_LIMITED", "SHUTTING_DOWN", "WAL_IO_ERROR", "INTERNAL_ERROR",
    "FORBIDDEN", "BATCH_ABORTED", "CROSS_SHARD", "STALE_EPOCH", "NO_PRIMARY", "STORAGE_FULL",
    "MOVED", "TRYAGAIN", "CLUSTERDOWN", "CROSS_SLOT", "MIGRATION_ABORTED",
    "NOT_FOUND", "METHOD_NOT_ALLOWED",
]


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_")) + "Error"


#: The exception class of each server code.
BY_CODE: Dict[str, Type[ServerError]] = {
    code: type(_class_name(code), (ServerError,), {"code": code, "__doc__": f"Server code {code}."})
    for code in _CODES
}
globals().update({cls.__name__: cls for cls in BY_CODE.values()})

# Named for type checkers and readers (the classes are the ones in BY_CODE).
HelloRequiredError: Type[ServerError] = BY_CODE["HELLO_REQUIRED"]
UnsupportedProtocolError: Type[ServerError] = BY_CODE["UNSUPPORTED_PROTOCOL"]
BadRequestError: Type[ServerError] = BY_CODE["BAD_REQUEST"]
UnknownOperationError: Type[ServerError] = BY_CODE["UNKNOWN_OPERATION"]
InvalidFrameError: Type[ServerError] = BY_CODE["INVALID_FRAME"]
ChecksumMismatchError: Type[ServerError] = BY_CODE["CHECKSUM_MISMATCH"]
FrameTooLargeError: Type[ServerError] = BY_CODE["FRAME_TOO_LARGE"]
UnauthorizedError: Type[ServerError] = BY_CODE["UNAUTHORIZED"]
AuthFailedError: Type[ServerError] = BY_CODE["AUTH_FAILED"]
MachineNotFoundError: Type[ServerError] = BY_CODE["MACHINE_NOT_FOUND"]
MachineVersionExistsError: Type[ServerError] = BY_CODE["MACHINE_VERSION_EXISTS"]
InvalidDefinitionError: Type[ServerError] = BY_CODE["INVALID_DEFINITION"]
InstanceNotFoundError: Type[ServerError] = BY_CODE["INSTANCE_NOT_FOUND"]
InstanceExistsError: Type[ServerError] = BY_CODE["INSTANCE_EXISTS"]
InvalidTransitionError: Type[ServerError] = BY_CODE["INVALID_TRANSITION"]
GuardFailedError: Type[ServerError] = BY_CODE["GUARD_FAILED"]
ConflictError: Type[ServerError] = BY_CODE["CONFLICT"]
ReadOnlyModeError: Type[ServerError] = BY_CODE["READ_ONLY_MODE"]
SyncTimeoutError: Type[ServerError] = BY_CODE["SYNC_TIMEOUT"]
ConnectionLimitError: Type[ServerError] = BY_CODE["CONNECTION_LIMIT"]
RateLimitedError: Type[ServerError] = BY_CODE["RATE_LIMITED"]
ShuttingDownError: Type[ServerError] = BY_CODE["SHUTTING_DOWN"]
WalIoErrorError: Type[ServerError] = BY_CODE["WAL_IO_ERROR"]
InternalErrorError: Type[ServerError] = BY_CODE["INTERNAL_ERROR"]
ForbiddenError: Type[ServerError] = BY_CODE["FORBIDDEN"]
BatchAbortedError: Type[ServerError] = BY_CODE["BATCH_ABORTED"]
CrossShardError: Type[ServerError] = BY_CODE["CROSS_SHARD"]
StaleEpochError: Type[ServerError] = BY_CODE["STALE_EPOCH"]
NoPrimaryError: Type[ServerError] = BY_CODE["NO_PRIMARY"]
StorageFullError: Type[ServerError] = BY_CODE["STORAGE_FULL"]
MovedError: Type[ServerError] = BY_CODE["MOVED"]
TryagainError: Type[ServerError] = BY_CODE["TRYAGAIN"]
ClusterdownError: Type[ServerError] = BY_CODE["CLUSTERDOWN"]
CrossSlotError: Type[ServerError] = BY_CODE["CROSS_SLOT"]
MigrationAbortedError: Type[ServerError] = BY_CODE["MIGRATION_ABORTED"]
NotFoundError: Type[ServerError] = BY_CODE["NOT_FOUND"]
MethodNotAllowedError: Type[ServerError] = BY_CODE["METHOD_NOT_ALLOWED"]


def from_wire(error: Any) -> ServerError:
    """The exception for an error envelope's ``error`` object."""
    if not isinstance(error, dict):
        error = {}
    code = str(error.get("code", "UNKNOWN"))
    cls = BY_CODE.get(code, ServerError)
    return cls(
        str(error.get("message", "")),
        code=code,
        retryable=error.get("retryable"),
        details=error.get("details") if isinstance(error.get("details"), dict) else {},
    )


def may_resend(exc: BaseException, safe: bool) -> bool:
    """Whether a request (``safe``: a read, PUT_MACHINE, or a write with an idempotency key)
    may be sent again after ``exc`` without risk of applying it twice."""
    if isinstance(exc, ServerError):
        maybe_committed = bool(exc.details.get("maybe_committed"))
        return (exc.code in NOT_EXECUTED and not maybe_committed) or (exc.retryable and safe)
    if isinstance(exc, (ConnectionLost, OSError, TimeoutError)):
        return safe
    return False
