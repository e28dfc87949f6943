package ratelimit

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unescape reads a field of PostgreSQL's text COPY format.
func unescape(s string) string {
	r := strings.NewReplacer(`\t`, "\t", `\n`, "\n", `\r`, "\r", `\\`, `\`)
	return r.Replace(s)
}

// TestClientIPVectors replays the rl_client_ip and rl_client_ip_forwarded
// rows of test/vectors/client_ip.tsv, the vectors the server's tests replay.
func TestClientIPVectors(t *testing.T) {
	walks := map[string]func(netip.Addr, string, TrustedProxies) netip.Addr{
		"rl_client_ip":           ClientIP,
		"rl_client_ip_forwarded": ClientIPForwarded,
	}
	counts := map[string]int{}
	src := os.Getenv("RL_SRC")
	if src == "" {
		src = filepath.Join("..", "..")
	}
	data, err := os.ReadFile(filepath.Join(src, "test", "vectors", "client_ip.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 || walks[f[0]] == nil {
			continue
		}
		counts[f[0]]++
		remoteText, header, trustedText, want, what := f[1], f[2], f[3], f[4], f[5]
		var list []string
		if trustedText != `\N` && trustedText != "{}" {
			list = strings.Split(strings.Trim(trustedText, "{}"), ",")
		}
		trusted, err := ParseTrustedProxies(list)
		if strings.HasPrefix(want, "ERROR ") {
			var e *Error
			if !errors.As(err, &e) || e.Code != strings.TrimPrefix(want, "ERROR ") || !errors.Is(err, ErrBadArgument) {
				t.Errorf("%s: trusted %s: got %v, want %s", what, trustedText, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: trusted %s refused: %v", what, trustedText, err)
			continue
		}
		var remote netip.Addr
		if remoteText != `\N` {
			if i := strings.IndexByte(remoteText, '/'); i >= 0 {
				remoteText = remoteText[:i] // an inet's netmask
			}
			remote = netip.MustParseAddr(remoteText)
		}
		if header == `\N` {
			header = ""
		}
		got := walks[f[0]](remote, unescape(header), trusted)
		if want == `\N` {
			if got.IsValid() {
				t.Errorf("%s: got %v, want NULL", what, got)
			}
			continue
		}
		if got != netip.MustParseAddr(want) {
			t.Errorf("%s: got %v, want %s", what, got, want)
		}
	}
	if counts["rl_client_ip"] < 80 || counts["rl_client_ip_forwarded"] < 25 {
		t.Fatalf("too few vectors: %v", counts)
	}
	t.Logf("vectors: %v", counts)
}

func TestIPKey(t *testing.T) {
	for _, c := range []struct {
		ip     string
		prefix int
		want   string
	}{
		{"203.0.113.7", 64, "203.0.113.7"},
		{"::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:0:0:1:0:0:1", 128, "2001:db8::1:0:0:1/128"},
		{"2001:0:0:1::1", 48, "2001::/48"},
	} {
		got, err := IPKey(netip.MustParseAddr(c.ip), c.prefix)
		if err != nil || got != c.want {
			t.Errorf("IPKey(%s, %d) = %q, %v; want %q", c.ip, c.prefix, got, err, c.want)
		}
	}
	if _, err := IPKey(netip.MustParseAddr("::1"), 0); !errors.Is(err, ErrBadArgument) {
		t.Errorf("a prefix of 0: %v", err)
	}
}
