'use strict';
// The client address behind trusted proxies, by the rules of the server's
// rl_client_ip and rl_client_ip_forwarded (src/forwarded_parse.c, replayed by
// test/vectors/client_ip.tsv), and the text of rl_ip_key.  A header is read
// from its right end and never further left than the walk needs: the part a
// client wrote is not parsed.  Addresses are { v6, bytes } (16 bytes; IPv4
// in the first four).

const { RateLimitUsageError } = require('./errors');

const MAX_ENTRY_LEN = 64;
const MAX_TRUSTED_HOPS = 64;
const MAPPED = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

const isDigit = (c) => c >= '0' && c <= '9';
const isOws = (c) => c === ' ' || c === '\t';
const isTchar = (c) => /^[A-Za-z0-9!#$%&'*+\-.^_`|~]$/.test(c);
const isZoneChar = (c) => /^[A-Za-z0-9._~-]$/.test(c);

// Exactly four decimal octets 0-255 without leading zeros.
function parseIpv4(s) {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    if (!/^[0-9]{1,3}$/.test(p) || (p.length > 1 && p[0] === '0') || Number(p) > 255) return null;
    bytes[i] = Number(p);
  }
  return { v6: false, bytes };
}

// RFC 4291 text, at most one "::", optionally ending in dotted IPv4; no zone.
function parseIpv6(s) {
  const bytes = [];
  let gap = -1;
  let i = 0;
  if (s.startsWith('::')) {
    gap = 0;
    i = 2;
  }
  while (i < s.length) {
    const start = i;
    while (i < s.length && i - start < 5 && /[0-9A-Fa-f]/.test(s[i])) i++;
    if (i < s.length && s[i] === '.') {
      const v4 = bytes.length <= 12 ? parseIpv4(s.slice(start)) : null;
      if (v4 === null) return null;
      bytes.push(...v4.bytes.slice(0, 4));
      break;
    }
    if (i === start || i - start > 4 || bytes.length === 16) return null;
    const value = parseInt(s.slice(start, i), 16);
    bytes.push(value >> 8, value & 0xff);
    if (i === s.length) break;
    if (s[i] !== ':' || ++i === s.length) return null;
    if (s[i] === ':') {
      if (gap >= 0) return null;
      gap = bytes.length;
      i++;
    }
  }
  if (gap < 0 ? bytes.length !== 16 : bytes.length === 16) return null;
  const out = new Uint8Array(16);
  if (gap < 0) out.set(bytes);
  else {
    out.set(bytes.slice(0, gap));
    out.set(bytes.slice(gap), 16 - (bytes.length - gap));
  }
  return { v6: true, bytes: out };
}

const isMapped = (a) => a.v6 && MAPPED.every((b, i) => a.bytes[i] === b);

// IPv4-mapped IPv6 becomes IPv4, judged by its bits.
function unmap(a) {
  if (!isMapped(a)) return a;
  const bytes = new Uint8Array(16);
  bytes.set(a.bytes.slice(12, 16));
  return { v6: false, bytes };
}

function prefixEqual(a, b, bits) {
  const whole = bits >> 3;
  for (let i = 0; i < whole; i++) if (a[i] !== b[i]) return false;
  const rest = bits & 7;
  return rest === 0 || ((a[whole] ^ b[whole]) & (0xff << (8 - rest)) & 0xff) === 0;
}

function maskBits(bytes, bits) {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < 16; i++) {
    const keep = bits - i * 8;
    if (keep <= 0) out[i] = 0;
    else if (keep < 8) out[i] &= (0xff << (8 - keep)) & 0xff;
  }
  return out;
}

// One trusted "address[/prefix]", normalized as the server does; throws on
// a range that is not one, or that would trust every client.
function parseRange(text) {
  const refuse = (why) => new RateLimitUsageError(`trusted range "${text}" ${why}`, '22023');
  if (text === null || text === undefined) throw new RateLimitUsageError('trusted must not contain null', '22023');
  const s = String(text).trim();
  const slash = s.indexOf('/');
  const addrText = slash < 0 ? s : s.slice(0, slash);
  const addr = addrText.includes(':') ? parseIpv6(addrText) : parseIpv4(addrText);
  if (addr === null) throw refuse('is not an IPv4 or IPv6 address with an optional /prefix length');
  let bits = addr.v6 ? 128 : 32;
  if (slash >= 0) {
    const digits = s.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(digits) || (digits.length > 1 && digits[0] === '0')) {
      throw refuse('is not an IPv4 or IPv6 address with an optional /prefix length');
    }
    bits = Number(digits);
  }
  if (bits > (addr.v6 ? 128 : 32)) throw refuse('has a prefix length above 32 for IPv4 or 128 for IPv6');
  if (bits === 0) throw refuse('has a prefix length of 0, which would trust every address');
  if (!prefixEqual(maskBits(addr.bytes, bits), addr.bytes, 128)) throw refuse('has bits set to the right of its prefix length');
  if (addr.v6) {
    if (bits <= 96 && prefixEqual(addr.bytes, MAPPED, bits)) {
      throw refuse('covers all of ::ffff:0:0/96, which would trust every IPv4 address');
    }
    if (isMapped(addr)) return { addr: unmap(addr), bits: bits - 96 };
  }
  return { addr, bits };
}

// Checked trusted ranges, parsed once.
class TrustList {
  constructor(ranges) { this.ranges = ranges; }
}

// trusted: an array of ranges, one comma-separated string, or a TrustList;
// null: nobody.
function parseTrusted(trusted) {
  if (trusted instanceof TrustList) return trusted;
  if (trusted === null || trusted === undefined) return new TrustList([]);
  if (typeof trusted === 'string') {
    return new TrustList(trusted.trim() === '' ? [] : trusted.split(',').map(parseRange));
  }
  if (!Array.isArray(trusted)) throw new RateLimitUsageError('trusted must be an array of ranges or a string', '22023');
  return new TrustList(trusted.map(parseRange));
}

const isTrusted = (a, ranges) => ranges.some((r) => r.addr.v6 === a.v6 && prefixEqual(r.addr.bytes, a.bytes, r.bits));

function parsePort(s) {
  return /^[1-9][0-9]{0,4}$/.test(s) && Number(s) <= 65535;
}

function parseIpv6Zoned(s) {
  const percent = s.indexOf('%');
  if (percent >= 0) {
    const zone = s.slice(percent + 1);
    if (zone === '' || ![...zone].every(isZoneChar)) return null;
    s = s.slice(0, percent);
  }
  return parseIpv6(s);
}

// One node: IPv4[:port], [IPv6][:port], or (bareIpv6) IPv6; unmapped; the
// unspecified addresses and anything else are malformed (null).
function parseNode(s, bareIpv6) {
  if (s.length === 0 || s.length > MAX_ENTRY_LEN) return null;
  let a = null;
  if (s[0] === '[') {
    const close = s.indexOf(']');
    if (close < 0) return null;
    a = parseIpv6Zoned(s.slice(1, close));
    if (a !== null && !(close + 1 === s.length || (s[close + 1] === ':' && parsePort(s.slice(close + 2))))) a = null;
  } else {
    const colon = s.indexOf(':');
    a = parseIpv4(colon < 0 ? s : s.slice(0, colon));
    if (a !== null) {
      if (colon >= 0 && !parsePort(s.slice(colon + 1))) a = null;
    } else if (bareIpv6) a = parseIpv6Zoned(s);
  }
  if (a === null) return null;
  a = unmap(a);
  return a.bytes.every((b) => b === 0) ? null : a;
}

function skipOwsLeft(s, pos) {
  while (pos > 0 && isOws(s[pos - 1])) pos--;
  return pos;
}

// X-Forwarded-For, from the cursor leftwards: a node, 'malformed' or 'end'.
function xffNext(cursor) {
  const s = cursor.header;
  let pos = cursor.unread;
  for (;;) {
    const end = skipOwsLeft(s, pos);
    let start = end;
    if (end === 0) return 'end';
    if (s[end - 1] === ',') {
      pos = end - 1;
      continue;
    }
    while (start > 0 && s[start - 1] !== ',' && !isOws(s[start - 1])) {
      if (end - start === MAX_ENTRY_LEN) return 'malformed';
      start--;
    }
    pos = skipOwsLeft(s, start);
    if (pos > 0 && s[pos - 1] !== ',') return 'malformed';
    cursor.unread = pos > 0 ? pos - 1 : 0;
    return parseNode(s.slice(start, end), true) ?? 'malformed';
  }
}

// The opening quote of the quoted-string closing at s[close], or -1.
function quotedStringStart(s, close) {
  let pos = close;
  let closing = true;
  for (;;) {
    const c = s.charCodeAt(pos);
    if (c === 0x22) {
      let slashes = 0;
      while (slashes < pos && s[pos - 1 - slashes] === '\\') slashes++;
      if (slashes % 2 === 0) {
        if (!closing) return pos;
      } else if (closing) return -1;
      closing = false;
    } else if (c < 0x20 ? c !== 0x09 : c === 0x7f) return -1;
    if (pos === 0) return -1;
    pos--;
  }
}

// RFC 7239 Forwarded: the element that ends at the cursor, its for= node.
function forwardedNext(cursor) {
  const s = cursor.header;
  let pos = cursor.unread;
  for (;;) {
    let empty = true;
    let forValue = null;
    let forQuoted = false;
    pos = skipOwsLeft(s, pos);
    if (pos === 0) return 'end';
    while (pos > 0 && s[pos - 1] !== ',') {
      empty = false;
      if (s[pos - 1] !== ';') {
        let valueStart;
        let valueEnd = pos;
        const quoted = s[pos - 1] === '"';
        if (quoted) {
          pos = quotedStringStart(s, pos - 1);
          if (pos < 0) return 'malformed';
          valueStart = pos + 1;
          valueEnd--;
        } else {
          while (pos > 0 && isTchar(s[pos - 1])) pos--;
          valueStart = pos;
          if (valueStart === valueEnd) return 'malformed';
        }
        if (pos === 0 || s[pos - 1] !== '=') return 'malformed';
        const nameEnd = --pos;
        while (pos > 0 && isTchar(s[pos - 1])) pos--;
        if (pos === nameEnd) return 'malformed';
        if (s.slice(pos, nameEnd).toLowerCase() === 'for') {
          if (forValue !== null) return 'malformed';
          forValue = s.slice(valueStart, valueEnd);
          forQuoted = quoted;
        }
        pos = skipOwsLeft(s, pos);
        if (pos === 0 || s[pos - 1] === ',') break;
        if (s[pos - 1] !== ';') return 'malformed';
      }
      pos = skipOwsLeft(s, pos - 1);
    }
    if (pos > 0) pos--;
    cursor.unread = pos;
    if (empty) continue;
    if (forValue === null) return 'malformed';
    if (forQuoted && forValue.includes('\\')) return 'malformed';
    return parseNode(forValue, false) ?? 'malformed';
  }
}

// A remote address as text (an inet: a netmask is dropped), unmapped.
function parseRemote(remote) {
  const s = String(remote);
  const slash = s.indexOf('/');
  const text = slash < 0 ? s : s.slice(0, slash);
  const a = text.includes(':') ? parseIpv6Zoned(text) : parseIpv4(text);
  if (a === null) throw new RateLimitUsageError(`remote "${s}" is not an IP address`, '22P02');
  return unmap(a);
}

function walk(next, remote, header, trusted) {
  const { ranges } = parseTrusted(trusted);	// checked first, whatever the rest is
  if (remote === null || remote === undefined) return null;
  let cur = parseRemote(remote);
  if (!isTrusted(cur, ranges)) return format(cur);
  const cursor = { header: header ?? '', unread: (header ?? '').length };
  for (let hops = 0; hops < MAX_TRUSTED_HOPS; hops++) {
    const node = next(cursor);
    if (typeof node === 'string') return format(cur);
    if (!isTrusted(node, ranges)) return format(node);
    cur = node;
  }
  return format(cur);
}

// rl_client_ip(remote, xff, trusted): the address the nearest trusted proxy
// saw, as text; remote null: null.
function clientIp(remote, xff, trusted) {
  return walk(xffNext, remote, xff, trusted);
}

// rl_client_ip_forwarded(remote, forwarded, trusted), by RFC 7239.
function clientIpForwarded(remote, forwarded, trusted) {
  return walk(forwardedNext, remote, forwarded, trusted);
}

// Dotted IPv4, or RFC 5952 IPv6.
function format(a) {
  const b = a.bytes;
  if (!a.v6) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  const groups = [];
  for (let i = 0; i < 8; i++) groups.push((b[2 * i] << 8) | b[2 * i + 1]);
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; i++) {
    let run = 0;
    while (i + run < 8 && groups[i + run] === 0) run++;
    if (run > bestLen) {
      best = i;
      bestLen = run;
    }
  }
  if (best < 0) return groups.map((g) => g.toString(16)).join(':');
  const left = groups.slice(0, best).map((g) => g.toString(16)).join(':');
  const right = groups.slice(best + bestLen).map((g) => g.toString(16)).join(':');
  return `${left}::${right}`;
}

// rl_ip_key(ip, ipv6Prefix): IPv4 as itself; IPv6 masked to its prefix,
// with the prefix length, so a host cannot leave its budget by rotating
// addresses inside its own prefix.
function ipKey(ip, ipv6Prefix = 64) {
  if (!Number.isInteger(ipv6Prefix) || ipv6Prefix < 1 || ipv6Prefix > 128) {
    throw new RateLimitUsageError('ipv6_prefix must be between 1 and 128', '22023');
  }
  const a = parseRemote(ip);
  if (!a.v6) return format(a);
  return `${format({ v6: true, bytes: maskBits(a.bytes, ipv6Prefix) })}/${ipv6Prefix}`;
}

module.exports = { clientIp, clientIpForwarded, ipKey, parseTrusted };
