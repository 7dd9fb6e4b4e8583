"""Egress rules: which hosts a tenant-supplied URL (a source, the LLM probe) may make the operator reach.

The decision is pure (``refusal``); ``resolve`` is the one I/O function, and ``pin`` puts the two
together: it returns the address that was checked, and callers connect to that address (sending the
original name as Host and TLS SNI), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot move the connection elsewhere.

Contract, by default (no allowlist):

- a host *name* is refused before it is resolved when it is ``localhost`` or ``*.localhost``, or ends
  in ``.svc`` or in the cluster domain (``*.cluster.local``): in-cluster Services, other tenants'
  engines included, are not reachable by name;
- names are resolved as fully qualified (a trailing dot), so the pod's DNS search path never turns
  ``engine.team-b`` into ``engine.team-b.svc.cluster.local``;
- every address a name resolves to must be a global unicast address: loopback, link-local (cloud
  metadata 169.254.169.254, fe80::/10, AWS's fd00:ec2::254), RFC 1918, unique local (fc00::/7), CGNAT
  (100.64.0.0/10), multicast, unspecified, documentation and reserved ranges are refused, and so
  are the cluster's Service and Pod ranges (``cluster_networks``) whatever they are;
- IPv4-mapped (``::ffff:a.b.c.d``), NAT64 (``64:ff9b::/96``) and 6to4 addresses are judged by the IPv4
  address they carry;
- the IPv6 forms that carry an IPv4 address some other way, or that are not global unicast, are refused
  outright whatever they carry: IPv4-compatible (``::a.b.c.d``, ``::/96``), IPv4-translated
  (``::ffff:0:a.b.c.d``, ``::ffff:0:0:0/96``), local-use NAT64 (``64:ff9b:1::/48``: the IPv4 address sits
  where the gateway's prefix length puts it) and site-local (``fec0::/10``); so is any other IPv6 address
  outside global unicast (``2000::/3``). Python's ``is_global`` calls all of these public.

The allowlist opens what an operator admin names: an address inside an allowlisted CIDR is allowed
(except in the cluster's Service and Pod ranges: those only open by name); a host name in the
allowlist (``git.internal.example``, or ``*.internal.example`` for its subdomains) skips the name
rule and may resolve to any address. A refusal carries a reason fit for a status line.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
RESOLVE_TIMEOUT_S = 10.0

# Named so a refusal says why; anything else that is not global unicast is refused as "not public".
_KNOWN = [
    ("loopback", ("127.0.0.0/8", "::1/128")),
    ("link-local (cloud metadata lives there)", ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")),
    ("private (RFC 1918)", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    ("unique local (fc00::/7)", ("fc00::/7",)),
    ("shared address space (CGNAT, 100.64.0.0/10)", ("100.64.0.0/10",)),
    ("unspecified", ("0.0.0.0/8", "::/128")),
    ("multicast", ("224.0.0.0/4", "ff00::/8")),
    ("IPv4-compatible IPv6 (::/96, deprecated: it carries an IPv4 address)", ("::/96",)),
    ("IPv4-translated IPv6 (::ffff:0:0:0/96: it carries an IPv4 address)", ("::ffff:0:0:0/96",)),
    ("local-use NAT64 (64:ff9b:1::/48: a gateway reaches IPv4 through it)", ("64:ff9b:1::/48",)),
    ("site-local IPv6 (fec0::/10, deprecated)", ("fec0::/10",)),
]
KNOWN_RANGES: list[tuple[str, IPNetwork]] = [
    (why, ipaddress.ip_network(net)) for why, nets in _KNOWN for net in nets]
NAT64 = ipaddress.ip_network("64:ff9b::/96")
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")


class EgressDenied(Exception):
    """The URL's host is not reachable under the egress policy (the message says which rule)."""


@dataclass(frozen=True)
class EgressPolicy:
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_hosts: tuple[str, ...] = ()  # lower case; "*.example.com" = any subdomain of example.com
    cluster_networks: tuple[IPNetwork, ...] = ()
    cluster_domain: str = "cluster.local"
    denied_suffixes: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        domain = self.cluster_domain.strip(".").lower()
        object.__setattr__(self, "denied_suffixes", ("localhost", "svc", domain))

    @classmethod
    def build(cls, allow: Iterable[str] = (), cluster_cidrs: Iterable[str] = (),
              cluster_domain: str = "cluster.local") -> EgressPolicy:
        """From the operator's settings: ``allow`` mixes CIDRs (or single addresses) and host names."""
        networks, hosts = [], []
        for entry in (x.strip() for x in allow):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.append(normal_host(entry))
        return cls(tuple(networks), tuple(hosts), tuple(ipaddress.ip_network(x.strip(), strict=False)
                                                        for x in cluster_cidrs if x.strip()), cluster_domain)

    @classmethod
    def from_settings(cls, settings: Any) -> EgressPolicy:
        """From ``OperatorSettings`` (sources_egress_allow, sources_cluster_cidrs, cluster_domain)."""
        return cls.build(settings.sources_egress_allow, settings.sources_cluster_cidrs, settings.cluster_domain)

    def host_allowed(self, host: str) -> bool:
        host = normal_host(host)
        return any(host == p or (p.startswith("*.") and host.endswith(p[1:])) for p in self.allow_hosts)


def normal_host(host: str) -> str:
    return host.strip().rstrip(".").lower()


def embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def name_refusal(host: str, policy: EgressPolicy) -> str | None:
    """Why ``host`` (a name, not an address literal) may not be fetched, or None."""
    host = normal_host(host)
    if policy.host_allowed(host):
        return None
    for suffix in policy.denied_suffixes:
        if host == suffix or host.endswith("." + suffix):
            return f"host {host} is a local or in-cluster name ({suffix} or *.{suffix})"
    return None


def address_refusal(address: IPAddress, policy: EgressPolicy) -> str | None:
    """What makes ``address`` refused ("loopback", ...), or None (the host name was not allowlisted)."""
    judged = embedded_ipv4(address)
    for net in policy.cluster_networks:
        if judged.version == net.version and judged in net:
            return f"in the cluster's Service or Pod range {net}"
    if any(judged.version == net.version and judged in net for net in policy.allow_networks):
        return None
    for why, net in KNOWN_RANGES:
        if judged.version == net.version and judged in net:
            return why
    if not judged.is_global or (judged.version == 6 and judged not in GLOBAL_UNICAST_V6):
        return "not a public address"
    return None


def refusal(host: str, addresses: list[IPAddress], policy: EgressPolicy) -> str | None:
    """Pure: why ``host`` resolving to ``addresses`` may not be fetched, or None. Every address must pass
    (a name answering one public and one private address is refused, whichever would be used)."""
    literal = _literal(host)
    if literal is None:
        why = name_refusal(host, policy)
        if why:
            return why
        if policy.host_allowed(host):
            return None
    if not addresses:
        return f"host {host} does not resolve"
    for address in addresses:
        why = address_refusal(address, policy)
        if why:
            return (f"{address} is {why}" if literal is not None
                    else f"host {normal_host(host)} resolves to {address}, which is {why}")
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


_resolver_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="egress-dns")


def resolve(host: str, port: int, timeout: float = RESOLVE_TIMEOUT_S, search: bool = False) -> list[IPAddress]:
    """Every address of ``host`` (an address literal is its own answer), as a fully qualified name
    unless ``search`` (the DNS search path and /etc/hosts short names apply); a resolver that does not
    answer within ``timeout`` counts as no answer."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    name = normal_host(host) + ("" if search else ".")
    job = _resolver_pool.submit(socket.getaddrinfo, name, port, type=socket.SOCK_STREAM)
    try:
        infos = job.result(timeout=timeout)
    except (OSError, UnicodeError, concurrent.futures.TimeoutError):
        return []
    found: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in found:
            found.append(address)
    return found


@dataclass(frozen=True)
class Pinned:
    host: str  # as the URL names it (IDNA-encoded), for Host / SNI / known_hosts
    port: int
    address: IPAddress  # the checked address to connect to


def pin(host: str, port: int, policy: EgressPolicy, resolver: Callable[[str, int], list[IPAddress]] | None = None,
        timeout: float = RESOLVE_TIMEOUT_S) -> Pinned:
    """The address to connect to for ``host``, or EgressDenied with the reason. ``timeout``: how long the
    resolver may take (a call's deadline passes what is left of it)."""
    if not host:
        raise EgressDenied("the URL has no host")
    why = name_refusal(host, policy) if _literal(host) is None else None
    if why:
        raise EgressDenied(why)
    addresses = resolver(host, port) if resolver else resolve(host, port, timeout)
    if not addresses and resolver is None and policy.host_allowed(host):
        addresses = resolve(host, port, timeout, search=True)  # an allowlisted name may live in /etc/hosts
    why = refusal(host, addresses, policy)
    if why:
        raise EgressDenied(why)
    return Pinned(host, port, sorted(addresses, key=lambda a: a.version)[0])  # IPv4 first, as most clients
