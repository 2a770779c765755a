"""smdb: the Python client of smdb, the state-machine database.

``smdb.aio.Client`` (asyncio) and ``smdb.Client`` (blocking, a thin wrapper) speak RCP1 over
TCP or TLS with the standard library only: typed calls for every op, pipelining, subscriptions
that resume from their cursor, one exception class per server error code.

``smdb.CRC32C_IMPLEMENTATION`` says which CRC32C is in use: ``"c"`` (the optional accelerator
``smdb._speedups``, built at install where a C compiler and the Python headers are there) or
``"python"`` (the fallback; ``SMDB_PURE_PYTHON=1`` forces it)."""

from . import client as aio
from ._cluster import crc16_xmodem, routing_key, slot_of
from ._lifecycle import add_reply
from ._frame import CRC32C_IMPLEMENTATION, crc32c, decode_frame, encode_frame
from .client import ConnectOptions, Request, RetryPolicy, apply_event, create_instance
from .errors import (
    BY_CODE,
    ConnectionLost,
    ProtocolError,
    ServerError,
    SmdbError,
    SubscriptionLagged,
)
from .errors import *  # noqa: F401,F403  (one class per code: GuardFailedError, ...)
from .sync import Client, Subscription

__version__ = "0.1.0"

__all__ = [
    "aio",
    "Client",
    "Subscription",
    "ConnectOptions",
    "Request",
    "RetryPolicy",
    "apply_event",
    "create_instance",
    "add_reply",
    "crc16_xmodem",
    "routing_key",
    "slot_of",
    "crc32c",
    "CRC32C_IMPLEMENTATION",
    "encode_frame",
    "decode_frame",
    "SmdbError",
    "ServerError",
    "ConnectionLost",
    "ProtocolError",
    "SubscriptionLagged",
    "BY_CODE",
] + [cls.__name__ for cls in BY_CODE.values()]
