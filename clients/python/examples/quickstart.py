"""The main README's quick start, from Python (sync client), plus a subscription.

    python3 quickstart.py [HOST:PORT]
"""

import sys

import smdb

ORDER = {
    "states": ["new", "paid", "shipped"],
    "initial": "new",
    "final": ["shipped"],
    "transitions": [
        {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
        {"from": "paid", "event": "ship", "to": "shipped"},
    ],
}

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7401"
host, port = addr.rsplit(":", 1)
with smdb.Client(host, int(port)) as db:
    print(db.ping())
    print(db.put_machine("order", 1, ORDER))
    print(db.create_instance("order", 1, "order-1", {"total": 30}))
    events = db.watch_instance("order-1")
    try:
        db.apply_event("order-1", "pay", {"amount": 10})
    except smdb.GuardFailedError as e:
        print(f"error: {e}", e.details)
    r = db.apply_event("order-1", "pay", {"amount": 30})
    print(f"{r['instance_id']}: {r['from_state']} -> {r['to_state']} (wal offset {r['wal_offset']})")
    print("event:", events.next(timeout=5))
    print(db.get_instance("order-1"))
