"""Where the load goes: URL → endpoint + readiness URL, and the loopback-only safety check.

A load generator is a traffic weapon: pointed at the wrong host it is a denial-of-service tool.
So by default we *resolve* the host and accept it only if every address it resolves to is
loopback (127.0.0.0/8 or ::1); a name like ``localhost`` that some resolver maps elsewhere is
refused too. ``--allow-remote`` is the explicit opt-out. The trade-off: a DNS lookup before the
run (fast for loopback names and literal IPs, which need none).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PATH = "/v1/embeddings"
READY_PATH = "/health/ready"


class RemoteTargetError(PermissionError):
    """The target resolves to a non-loopback address and --allow-remote was not given."""


@dataclass(frozen=True)
class Target:
    url: str  # the endpoint POSTed to
    ready_url: str  # GET before the run; 200 = ready
    host: str
    port: int


def parse_target(url: str) -> Target:
    """``http://127.0.0.1:8000`` → POST ``/v1/embeddings``; a URL with a path keeps its path.

    >>> parse_target("http://127.0.0.1:8000").url
    'http://127.0.0.1:8000/v1/embeddings'
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"target URL must start with http:// or https://, got {url!r}")
    if not parts.hostname:
        raise ValueError(f"target URL has no host: {url!r}")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    port = parts.port or (443 if parts.scheme == "https" else 80)
    endpoint = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    ready = urlunsplit((parts.scheme, parts.netloc, READY_PATH, "", ""))
    return Target(url=endpoint, ready_url=ready, host=parts.hostname, port=port)


def resolve_addresses(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve target host {host!r}: {exc.strerror}") from None
    return sorted({str(info[4][0]) for info in infos})


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 and ::1 (also an IPv4-mapped ::ffff:127.x address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def check_target(target: Target, allow_remote: bool = False) -> list[str]:
    """Resolve the host; raise RemoteTargetError unless all addresses are loopback."""
    addresses = resolve_addresses(target.host, target.port)
    remote = [a for a in addresses if not is_loopback(a)]
    if remote and not allow_remote:
        raise RemoteTargetError(
            f"refusing to load-test {target.host} (resolves to {', '.join(remote)}): only loopback "
            "targets (127.0.0.0/8, ::1) are allowed; pass --allow-remote if you own that server"
        )
    return addresses
