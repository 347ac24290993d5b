"""Pod IPs from the node's slice of 127.0.0.0/8.

Linux routes all of 127.0.0.0/8 to the loopback interface, so every pod can have its own
address without any network setup: two replicas of a server binding ``$(POD_IP):8080`` do
not collide, and probes reach each one. Addresses are handed out round-robin so a freed one
is not reused immediately (a stale client would otherwise reach the wrong pod).
"""

from __future__ import annotations

import ipaddress
import threading


class PodIPPool:
    def __init__(self, cidr: str) -> None:
        network = ipaddress.IPv4Network(cidr)
        if not network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"pod CIDR {cidr} must lie in 127.0.0.0/8 (loopback)")
        if network.num_addresses < 8:
            raise ValueError(f"pod CIDR {cidr} is too small; use a /16 such as 127.1.0.0/16")
        # Skip the network address and .1 (like a gateway); leave out the broadcast address.
        self._first = int(network.network_address) + 2
        self._size = network.num_addresses - 3
        self._in_use: set[str] = set()
        self._next = 0
        self._lock = threading.Lock()

    def allocate(self) -> str:
        with self._lock:
            for _ in range(self._size):
                candidate = str(ipaddress.IPv4Address(self._first + self._next))
                self._next = (self._next + 1) % self._size
                if candidate not in self._in_use:
                    self._in_use.add(candidate)
                    return candidate
        raise RuntimeError("pod CIDR exhausted: every address is in use")

    def release(self, address: str) -> None:
        with self._lock:
            self._in_use.discard(address)
