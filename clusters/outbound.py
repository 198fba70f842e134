"""Where the workers may connect on a cluster's behalf: an uploaded kubeconfig's server, the
endpoint GKE reports. Admins upload them, but every team's submit makes a worker call them
with credentials, so they are treated as hostile (server-side request forgery).

Checked when a kubeconfig is uploaded, again before each client is built, and on the socket
itself once it is connected (workloads/kube/client.py), so a name that resolves differently
later (DNS rebinding) is caught too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Names of cloud metadata servers; their addresses are refused below as well.
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog"})
# Metadata servers outside 169.254.0.0/16: GCE's and EC2's IPv6 ones, Alibaba's.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("fd20:ce::254", "fd00:ec2::254", "100.100.100.200")
)
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.x.y.z to the host itself
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class ForbiddenServer(ValueError):
    """A server the workers must not call; the message says why."""


def allows_insecure() -> bool:
    """Plain http and loopback servers: for local fakes only (the contract tests)."""
    return bool(settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS)


def check_server(url: str) -> None:
    """Refuse a URL the workers must not call: not https, or a forbidden host or address.

    A name that does not resolve here passes: the connection is checked again when made."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ForbiddenServer(f"{url!r} is not a URL") from None
    schemes = ("https", "http") if allows_insecure() else ("https",)
    if parts.scheme not in schemes:
        raise ForbiddenServer(
            f"{url!r} must be an https:// URL (plain http only with "
            "ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS, for local development)"
        )
    if not host:
        raise ForbiddenServer(f"{url!r} names no host")
    if host.rstrip(".").lower() in METADATA_HOSTS:
        raise ForbiddenServer(f"{host} is a cloud metadata server")
    for address in _addresses(host, port or 443):
        check_address(address, host)


def check_address(address: str, host: str = "") -> None:
    """Refuse an IP address the workers must not connect to (`host`: the name it came from)."""
    problem = _problem(ipaddress.ip_address(address.split("%", 1)[0]))
    if problem:
        shown = address if not host or host == address else f"{host} ({address})"
        raise ForbiddenServer(f"{shown} is {problem}")


def _problem(ip: IPAddress) -> str:
    ip = _embedded_ipv4(ip)
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata server"
    if ip.is_link_local:
        return "link-local (cloud metadata servers live there)"
    if ip.is_unspecified or ip in THIS_NETWORK:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_loopback:
        if allows_insecure():
            return ""
        return "a loopback address (only with ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS)"
    if ip.is_reserved or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local):
        return "a reserved address"
    return ""


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (::ffff:a.b.c.d, 6to4, NAT64), else `ip`."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    embedded = ip.ipv4_mapped or ip.sixtofour
    if embedded is not None:
        return embedded
    if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return ip


def _addresses(host: str, port: int) -> list[str]:
    """`host`'s addresses as the socket library reads it: decimal and hex forms included."""
    try:
        return [str(ipaddress.ip_address(host.split("%", 1)[0]))]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in found})
