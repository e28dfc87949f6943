// The client address behind trusted proxies, by the rules of rl_client_ip
// (design "Trusted proxies"; src/forwarded_parse.c is the reference): walk
// X-Forwarded-For from the right, from the peer, while the hop is trusted;
// a malformed entry answers the trusted hop that wrote it; nothing left of
// where the walk stops is parsed.  And rl_ip_key's text of an address.

package ratelimit

import (
	"fmt"
	"net/netip"
	"strings"
)

const (
	maxTrustedHops = 64 // the walk stops after this many trusted entries
	maxEntryLen    = 64 // an entry longer than this is malformed
)

var mappedPrefix = [12]byte{10: 0xff, 11: 0xff}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func isZoneChar(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isDigit(c) ||
		c == '.' || c == '_' || c == '~' || c == '-'
}

// parseIPv4 reads exactly four decimal octets 0-255 without leading zeros.
func parseIPv4(s string) (netip.Addr, bool) {
	var b [4]byte
	i := 0
	for octet := 0; octet < 4; octet++ {
		if octet > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		start := i
		v := 0
		for i < len(s) && i-start < 3 && isDigit(s[i]) {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || (i-start > 1 && s[start] == '0') {
			return netip.Addr{}, false
		}
		b[octet] = byte(v)
	}
	if i != len(s) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(b), true
}

// parseIPv6 reads RFC 4291 text: eight groups of 1-4 hex digits, at most one
// "::", optionally ending in dotted IPv4; no zone, no brackets.
func parseIPv6(s string) (netip.Addr, bool) {
	var bytes [16]byte
	n, gap, i := 0, -1, 0
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		gap, i = 0, 2
	}
	for i < len(s) {
		start := i
		v := 0
		for i < len(s) && i-start < 5 && hexValue(s[i]) >= 0 {
			v = v*16 + hexValue(s[i])
			i++
		}
		if i < len(s) && s[i] == '.' {
			v4, ok := parseIPv4(s[start:])
			if n > 12 || !ok {
				return netip.Addr{}, false
			}
			b4 := v4.As4()
			copy(bytes[n:], b4[:])
			n += 4
			break
		}
		if i == start || i-start > 4 || n == 16 {
			return netip.Addr{}, false
		}
		bytes[n], bytes[n+1] = byte(v>>8), byte(v)
		n += 2
		if i == len(s) {
			break
		}
		i++
		if s[i-1] != ':' || i == len(s) {
			return netip.Addr{}, false
		}
		if s[i] == ':' {
			if gap >= 0 {
				return netip.Addr{}, false
			}
			gap = n
			i++
		}
	}
	if (gap < 0 && n != 16) || (gap >= 0 && n == 16) {
		return netip.Addr{}, false
	}
	var out [16]byte
	if gap < 0 {
		out = bytes
	} else {
		copy(out[:gap], bytes[:gap])
		copy(out[16-(n-gap):], bytes[gap:n])
	}
	return netip.AddrFrom16(out), true
}

func parseIPv6Zoned(s string) (netip.Addr, bool) {
	if p := strings.IndexByte(s, '%'); p >= 0 {
		zone := s[p+1:]
		if zone == "" {
			return netip.Addr{}, false
		}
		for i := 0; i < len(zone); i++ {
			if !isZoneChar(zone[i]) {
				return netip.Addr{}, false
			}
		}
		s = s[:p]
	}
	return parseIPv6(s)
}

func parsePort(s string) bool {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
		v = v*10 + int(s[i]-'0')
	}
	return v <= 65535
}

// parseNode reads one X-Forwarded-For entry: IPv4 with an optional port,
// "[IPv6]" with an optional port, or bare IPv6; unmapped; the unspecified
// addresses are malformed.
func parseNode(s string, bareIPv6 bool) (netip.Addr, bool) {
	var a netip.Addr
	var ok bool
	if len(s) == 0 || len(s) > maxEntryLen {
		return a, false
	}
	if s[0] == '[' {
		closing := strings.IndexByte(s, ']')
		if closing < 0 {
			return a, false
		}
		a, ok = parseIPv6Zoned(s[1:closing])
		ok = ok && (closing+1 == len(s) || (s[closing+1] == ':' && parsePort(s[closing+2:])))
	} else {
		host := s
		colon := strings.IndexByte(s, ':')
		if colon >= 0 {
			host = s[:colon]
		}
		if a, ok = parseIPv4(host); ok {
			ok = colon < 0 || parsePort(s[colon+1:])
		} else if bareIPv6 {
			a, ok = parseIPv6Zoned(s)
		}
	}
	if !ok {
		return a, false
	}
	a = a.Unmap()
	return a, !a.IsUnspecified()
}

// xffCursor yields the entries of an X-Forwarded-For value from the right.
type xffCursor struct {
	s      string
	unread int
}

// next answers the entry that ends at the cursor: ok false at the end (done)
// or for a malformed entry, after which nothing left of it is read.
func (c *xffCursor) next() (a netip.Addr, ok, done bool) {
	s := c.s
	pos := c.unread
	for {
		end := pos
		for end > 0 && isOWS(s[end-1]) {
			end--
		}
		if end == 0 {
			c.unread = 0
			return a, false, true
		}
		if s[end-1] == ',' {
			pos = end - 1
			continue
		}
		start := end
		for start > 0 && s[start-1] != ',' && !isOWS(s[start-1]) {
			if end-start == maxEntryLen {
				c.unread = 0
				return a, false, false
			}
			start--
		}
		// white space left of the entry must reach a comma or the start
		pos = start
		for pos > 0 && isOWS(s[pos-1]) {
			pos--
		}
		if pos > 0 && s[pos-1] != ',' {
			c.unread = 0
			return a, false, false
		}
		if pos > 0 {
			c.unread = pos - 1
		} else {
			c.unread = 0
		}
		a, ok = parseNode(s[start:end], true)
		if !ok {
			c.unread = 0
		}
		return a, ok, false
	}
}

// TrustedProxies is a checked list of the ranges of your own proxies.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies checks a list of addresses and CIDR ranges as
// rl_client_ip checks its trusted argument: a prefix of 0 in either family,
// or an IPv6 range covering all of ::ffff:0:0/96, would trust every client
// and is refused (an *Error, SQLSTATE 22023); an IPv4-mapped range of /96
// or more is the IPv4 range it maps.
func ParseTrustedProxies(list []string) (TrustedProxies, error) {
	out := make(TrustedProxies, 0, len(list))
	for _, text := range list {
		t := strings.Trim(text, " \t")
		var p netip.Prefix
		var err error
		if strings.IndexByte(t, '/') >= 0 {
			p, err = netip.ParsePrefix(t)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(t); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return nil, trustError(text, "is not an IPv4 or IPv6 address with an optional /prefix length")
		}
		if p.Masked() != p {
			return nil, trustError(text, "has bits set to the right of its prefix length")
		}
		if p.Bits() == 0 {
			return nil, trustError(text, "has a prefix length of 0, which would trust every address")
		}
		if a := p.Addr(); a.Is6() {
			if p.Bits() <= 96 && p.Contains(netip.AddrFrom16(mappedPrefix16())) {
				return nil, trustError(text, "covers all of ::ffff:0:0/96, which would trust every IPv4 address")
			}
			if a.Is4In6() {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func mappedPrefix16() [16]byte {
	var b [16]byte
	copy(b[:], mappedPrefix[:])
	return b
}

func trustError(text, why string) *Error {
	return &Error{Code: "22023", Message: fmt.Sprintf("trusted must not contain %s: %s %s", text, text, why),
		kind: ErrBadArgument}
}

func (t TrustedProxies) trusts(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func skipOWSLeft(s string, pos int) int {
	for pos > 0 && isOWS(s[pos-1]) {
		pos--
	}
	return pos
}

// quotedStringStart answers the opening quote of the quoted-string that
// closes at s[closing], or -1.
func quotedStringStart(s string, closing int) int {
	pos := closing
	isClosing := true
	for {
		c := s[pos]
		if c == '"' {
			slashes := 0
			for slashes < pos && s[pos-1-slashes] == '\\' {
				slashes++
			}
			if slashes%2 == 0 {
				if !isClosing {
					return pos
				}
			} else if isClosing {
				return -1
			}
			isClosing = false
		} else if (c < 0x20 && c != '\t') || c == 0x7f {
			return -1
		}
		if pos == 0 {
			return -1
		}
		pos--
	}
}

// forwardedCursor yields the for= nodes of an RFC 7239 Forwarded value,
// element by element from the right.
type forwardedCursor struct {
	s      string
	unread int
}

// next answers the for= node of the element that ends at the cursor: ok
// false at the end or for a malformed element (one without for=, or with
// two), after which nothing left of it is read.
func (c *forwardedCursor) next() (netip.Addr, bool) {
	s := c.s
	pos := c.unread
	for {
		empty := true
		forValue, hasFor, forQuoted := "", false, false
		if pos = skipOWSLeft(s, pos); pos == 0 {
			return netip.Addr{}, false
		}
		for pos > 0 && s[pos-1] != ',' {
			empty = false
			if s[pos-1] != ';' {
				valueEnd := pos
				var valueStart int
				quoted := s[pos-1] == '"'
				if quoted {
					if pos = quotedStringStart(s, pos-1); pos < 0 {
						return netip.Addr{}, false
					}
					valueStart = pos + 1
					valueEnd--
				} else {
					for pos > 0 && isTchar(s[pos-1]) {
						pos--
					}
					valueStart = pos
					if valueStart == valueEnd {
						return netip.Addr{}, false
					}
				}
				if pos == 0 || s[pos-1] != '=' {
					return netip.Addr{}, false
				}
				pos--
				nameEnd := pos
				for pos > 0 && isTchar(s[pos-1]) {
					pos--
				}
				if pos == nameEnd {
					return netip.Addr{}, false
				}
				if strings.EqualFold(s[pos:nameEnd], "for") {
					if hasFor {
						return netip.Addr{}, false
					}
					forValue, hasFor, forQuoted = s[valueStart:valueEnd], true, quoted
				}
				pos = skipOWSLeft(s, pos)
				if pos == 0 || s[pos-1] == ',' {
					break
				}
				if s[pos-1] != ';' {
					return netip.Addr{}, false
				}
			}
			pos = skipOWSLeft(s, pos-1)
		}
		if pos > 0 {
			pos--
		}
		c.unread = pos
		if empty {
			continue
		}
		if !hasFor || (forQuoted && strings.IndexByte(forValue, '\\') >= 0) {
			return netip.Addr{}, false
		}
		return parseNode(forValue, false)
	}
}

// ClientIP answers the address the nearest trusted proxy saw, as
// rl_client_ip(remote, xff, trusted) does: remote (the peer) when it is not
// trusted, else the walk of xff from the right.  Several X-Forwarded-For
// lines are one list: join them with commas in the order they came.
func ClientIP(remote netip.Addr, xff string, trusted TrustedProxies) netip.Addr {
	c := xffCursor{s: xff, unread: len(xff)}
	return walk(remote, trusted, func() (netip.Addr, bool) {
		node, ok, _ := c.next()
		return node, ok
	})
}

// ClientIPForwarded is ClientIP for an RFC 7239 Forwarded value, as
// rl_client_ip_forwarded(remote, forwarded, trusted) does: the for= of
// each element, from the right.  Several Forwarded lines are one list, as
// for ClientIP.
func ClientIPForwarded(remote netip.Addr, forwarded string, trusted TrustedProxies) netip.Addr {
	c := forwardedCursor{s: forwarded, unread: len(forwarded)}
	return walk(remote, trusted, c.next)
}

// walk is the trusted-hop walk of ClientIP and ClientIPForwarded over the
// nodes next yields from the right (ok false: the end, or malformed).
func walk(remote netip.Addr, trusted TrustedProxies, next func() (netip.Addr, bool)) netip.Addr {
	cur := remote.WithZone("").Unmap()
	if !remote.IsValid() || !trusted.trusts(cur) {
		return cur
	}
	for hops := 0; hops < maxTrustedHops; hops++ {
		node, ok := next()
		if !ok {
			return cur
		}
		if !trusted.trusts(node) {
			return node
		}
		cur = node
	}
	return cur
}

// IPKey is rl_ip_key(ip, ipv6Prefix): IPv4 (IPv4-mapped included) as its
// dotted address; IPv6 masked to its first ipv6Prefix bits (1 to 128) and
// written with the prefix length, e.g. "2001:db8:1:2::/64", so that a host
// cannot leave its budget by rotating addresses inside its prefix.
func IPKey(ip netip.Addr, ipv6Prefix int) (string, error) {
	if ipv6Prefix < 1 || ipv6Prefix > 128 {
		return "", badArgument("22023", fmt.Sprintf("ipv6_prefix must be between 1 and 128, not %d", ipv6Prefix))
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		return ip.String(), nil
	}
	p := netip.PrefixFrom(ip, ipv6Prefix).Masked()
	return formatIPv6(p.Addr().As16()) + fmt.Sprintf("/%d", ipv6Prefix), nil
}

// formatIPv6 writes RFC 5952 text: lower-case hex without leading zeros, the
// longest run of two or more zero groups (the first of equals) as "::".
func formatIPv6(b [16]byte) string {
	best, bestLen := -1, 1
	for i := 0; i < 8; i++ {
		run := 0
		for i+run < 8 && b[2*(i+run)] == 0 && b[2*(i+run)+1] == 0 {
			run++
		}
		if run > bestLen {
			best, bestLen = i, run
		}
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		if i == best {
			sb.WriteString("::")
			i += bestLen - 1
			continue
		}
		if i != 0 && i != best+bestLen {
			sb.WriteByte(':')
		}
		fmt.Fprintf(&sb, "%x", uint16(b[2*i])<<8|uint16(b[2*i+1]))
	}
	return sb.String()
}
