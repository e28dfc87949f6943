"""What the HTTP integrations share: the client address by rl_client_ip's
rules, rl_ip_key, and the RateLimit fields of rl_headers, computed here from
the decision and the limit (no round trip)."""

import ipaddress
import math
import re

from typing import Dict, Iterable, List, Optional, Union

from . import _core, _rate, gcra

Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

_IPV4 = re.compile(r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\Z")
_PORT = re.compile(r"[1-9][0-9]{0,4}\Z")
_ZONE = re.compile(r"[A-Za-z0-9._~-]+\Z")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
MAX_ENTRY = 64
MAX_TRUSTED_HOPS = 64


def _unmap(addr):
    return addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped else addr


def trusted_networks(trusted: Optional[Iterable[str]]) -> List[Network]:
    """The trusted proxies (addresses or CIDRs) as networks, checked as rl_client_ip checks them."""
    networks = []
    for entry in trusted or ():
        if entry is None:
            raise _core.RateLimitError("trusted must not contain a null element", None, "22023")
        try:
            net = ipaddress.ip_network(str(entry), strict=False)
        except ValueError:
            raise _core.RateLimitError(f"trusted has an invalid entry: {entry!r}", None, "22023") from None
        if net.prefixlen == 0:
            raise _core.RateLimitError(f"trusted must not trust everyone: {entry}", None, "22023")
        if net.version == 6 and net.prefixlen <= 96 and _MAPPED.network_address in net:
            raise _core.RateLimitError(f"trusted must not trust all of IPv4: {entry}", None, "22023")
        if net.version == 6 and net.subnet_of(_MAPPED):
            # the IPv4 range it maps
            net = ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))
        networks.append(net)
    return networks


def _ipv6(text):
    """IPv6 text with an optional RFC 6874 zone, without it; None when malformed."""
    addr, sep, zone = text.partition("%")
    if sep and not _ZONE.match(zone):
        return None
    if ":" not in addr:
        return None
    try:
        return ipaddress.IPv6Address(addr)
    except ValueError:
        return None


def _node(text, bare_ipv6):
    """An address of an X-Forwarded-For entry or a Forwarded node, or None when malformed."""
    if len(text) > MAX_ENTRY:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        rest = text[end + 1:]
        if rest and not (rest[0] == ":" and _PORT.match(rest[1:]) and int(rest[1:]) <= 65535):
            return None
        addr = _ipv6(text[1:end])
    elif text.count(":") <= 1:
        host, sep, port = text.partition(":")
        if sep and not (_PORT.match(port) and int(port) <= 65535):
            return None
        m = _IPV4.match(host)
        if not m or any(int(o) > 255 for o in m.groups()):
            return None
        addr = ipaddress.IPv4Address(host)
    else:
        addr = _ipv6(text) if bare_ipv6 else None
    if addr is None:
        return None
    addr = _unmap(addr)
    return None if addr.is_unspecified else addr


def _walk(remote, entries, trusted):
    """The rules of rl_client_ip over entries (right to left: address, or None when malformed)."""
    networks = trusted_networks(trusted) if not isinstance(trusted, _Trusted) else trusted.networks
    if remote is None:
        return None
    if isinstance(remote, str):
        remote = ipaddress.ip_interface(remote.partition("%")[0]).ip
    cur = _unmap(remote)

    def is_trusted(addr):
        return any(addr.version == n.version and addr in n for n in networks)

    if not networks or not is_trusted(cur):
        return cur
    hops = 0
    for addr in entries:
        if addr is None:
            return cur
        if not is_trusted(addr):
            return addr
        cur = addr
        hops += 1
        if hops >= MAX_TRUSTED_HOPS:
            return cur
    return cur


class _Trusted:
    """A checked trusted list, for callers that walk many headers."""

    def __init__(self, trusted):
        self.networks = trusted_networks(trusted)


def _split_right(header, quotes, separator=","):
    """The parts of header from the right: (text, ok); quotes pair from the right."""
    end = len(header)
    while end > 0:
        i = end - 1
        in_quote = False
        while i >= 0 and (in_quote or header[i] != separator):
            if quotes and header[i] == '"':
                in_quote = not in_quote
            i -= 1
        yield header[i + 1:end], not in_quote
        end = i


def _xff_entries(xff):
    for part, _ in _split_right(xff or "", False):
        entry = part.strip(" \t")
        if entry:
            yield _node(entry, True)


def client_ip(remote: Union[str, Address, None], xff: Optional[str],
              trusted: Iterable[str] = ()) -> Optional[Address]:
    """rl_client_ip(remote, xff, trusted): the address the nearest trusted proxy saw.

    remote is the peer's address (text or ipaddress), xff the X-Forwarded-For
    lines joined with commas in the order they arrived (or None), trusted the
    proxies' addresses or CIDRs.  Answers an ipaddress address, or None.
    """
    return _walk(remote, _xff_entries(xff), trusted)


def _forwarded_entries(forwarded):
    for part, ok in _split_right(forwarded or "", True):
        element = part.strip(" \t")
        if not ok:
            yield None
            return
        if not element:
            continue
        node = None
        found = 0
        for pair, _ in _split_right(element, True, ";"):
            pair = pair.strip(" \t")
            if pair == "":
                continue
            name, sep, value = pair.partition("=")
            if not sep or not _TOKEN.match(name):
                found = -1
                break
            if value.startswith('"') and len(value) >= 2 and value.endswith('"'):
                value = value[1:-1]
                if '"' in value or "\\" in value:
                    found = -1
                    break
                quoted = True
            elif _TOKEN.match(value):
                quoted = False
            else:
                found = -1
                break
            if name.lower() == "for":
                found += 1
                node = _node(value, False) if quoted or _IPV4.match(value) else None
        yield node if found == 1 else None


def client_ip_forwarded(remote: Union[str, Address, None], forwarded: Optional[str],
                        trusted: Iterable[str] = ()) -> Optional[Address]:
    """rl_client_ip_forwarded(remote, forwarded, trusted): the same over RFC 7239's Forwarded."""
    return _walk(remote, _forwarded_entries(forwarded), trusted)


def ip_key(ip: Union[str, Address, None], ipv6_prefix: int = 64) -> Optional[str]:
    """rl_ip_key(ip, ipv6_prefix): IPv4 as text, IPv6 masked to its prefix (a host's
    budget cannot be escaped by rotating addresses inside its own prefix)."""
    if ip is None:
        return None
    if isinstance(ip, str):
        ip = ipaddress.ip_interface(ip).ip
    ip = _unmap(ip)
    if ip.version == 4:
        return str(ip)
    return str(ipaddress.ip_network((ip, ipv6_prefix), strict=False))


def _sf_string(limiter):
    out = []
    for i, ch in enumerate(limiter):
        if not " " <= ch <= "~":
            raise _core.RateLimitError("limiter must be printable ASCII to name an HTTP rate limit",
                                       None, "22023")
        out.append("\\" + ch if ch in '"\\' else ch)
    return '"' + "".join(out) + '"'


def headers(decision: _core.Decision, limiter: str, rate: _rate.RateLike,
            burst: Optional[int] = None) -> Dict[str, str]:
    """rl_headers(d, limiter, rate, burst): RateLimit-Policy, RateLimit and, on a
    denial that can be retried, Retry-After, as a dict of field to value (rate
    a Rate, "5/minute", or per second with burst)."""
    rate, burst = _rate.resolve(rate, burst)
    error, limit = gcra.limit_init(float(rate), burst, _core.wall_us(), _core.PG_MAX_TIME_US)
    if error != gcra.OK:
        raise _core.RateLimitError(gcra.MESSAGES[error], limiter, "22023")
    name = _sf_string(limiter)
    window = int(max(1.0, math.ceil(burst / rate)))
    fields = {"RateLimit-Policy": f"{name};q={burst};w={window}"}
    reset_us = int(round(decision.reset_after * 1e6))
    value = f"{name};r={decision.remaining}"
    next_cell = 0
    if reset_us > 0:
        back = reset_us % limit.interval_us or limit.interval_us
        next_cell = -(-back // 1000000)
        value += f";t={next_cell}"
    fields["RateLimit"] = value
    if not decision.allowed and math.isfinite(decision.retry_after):
        retry_us = int(round(decision.retry_after * 1e6))
        fields["Retry-After"] = str(max(-(-retry_us // 1000000), next_cell))
    return fields
