// Package netguard keeps the connectors that reach URLs a script names
// (http, custom connectors, the [notify] webhook) off this machine and its
// private networks: loopback, link-local, private (RFC 1918, ULA),
// unspecified, CGNAT and cloud-metadata addresses are refused unless
// keep.toml allows the host by name ([connectors.http] allow). Without it
// a script granted only http.request reached keep serve's own API on
// 127.0.0.1 and deployed, approved and paused (issue 23).
//
// The check is made on the address actually dialled (the resolved IP, in
// the dialer's Control hook), so a name that resolves to a public address
// when asked and to 127.0.0.1 when dialled (DNS rebinding) is refused too,
// and so is every connection a redirect would open.
//
// "This machine" is every address of every interface, whatever its range
// (issue 38 #6: a service listening on all addresses was reached through
// the machine's public address, which no range names). The interfaces'
// addresses are read at each check (net.InterfaceAddrs, one netlink
// request per new connection, tens of microseconds beside a TCP
// handshake), not cached: an address added a moment ago is refused at
// the next connection.
//
// It imports nothing of keep.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Guard decides which addresses may be dialled. The zero value refuses
// every internal address and allows nothing by name.
type Guard struct {
	hosts     map[string]bool // a host alone: all its ports
	hostPorts map[string]bool // host:port
	// machine lists this machine's addresses; nil: every address of
	// every interface, read at each check (tests give their own).
	machine func() ([]netip.Addr, error)
}

// WhyThisMachine is RefusedError.Why for an address of one of this
// machine's interfaces outside the ranges Internal names.
const WhyThisMachine = "this machine's own"

// interfaceAddrs is every address of every interface of this machine, now.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if x, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, x.Unmap())
		}
	}
	return out, nil
}

// thisMachine says why ip is refused as one of this machine's own
// addresses ("" when it is not). When the addresses cannot be read, no
// address is taken for another machine's.
func (g *Guard) thisMachine(ip netip.Addr) string {
	list := interfaceAddrs
	if g != nil && g.machine != nil {
		list = g.machine
	}
	addrs, err := list()
	if err != nil {
		return "unknown (this machine's own addresses could not be read: " + err.Error() + ")"
	}
	ip = ip.Unmap().WithZone("")
	for _, a := range addrs {
		if a.Unmap().WithZone("") == ip {
			return WhyThisMachine
		}
	}
	return ""
}

// New builds a guard from keep.toml's [connectors.http] allow entries
// ("127.0.0.1:8090", "localhost", "[::1]:9000"), checked by Parse.
func New(allow []string) *Guard {
	g := &Guard{hosts: map[string]bool{}, hostPorts: map[string]bool{}}
	for _, a := range allow {
		host, port, err := Parse(a)
		if err != nil {
			continue // Parse refused it when keep.toml was read
		}
		if port == "" {
			g.hosts[host] = true
		} else {
			g.hostPorts[net.JoinHostPort(host, port)] = true
		}
	}
	return g
}

// Parse checks one allow entry: a host name or IP, with an optional port.
// It returns the host in lower case (an IP in its canonical form).
func Parse(entry string) (host, port string, err error) {
	e := strings.TrimSpace(entry)
	if e == "" || strings.Contains(e, "/") || strings.Contains(e, "://") {
		return "", "", fmt.Errorf("%q is not a host or host:port (like \"127.0.0.1:8090\" or \"localhost\"; no scheme, no path)", entry)
	}
	host = e
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, port = h, p
		if n, err := netip.ParseAddrPort("0.0.0.0:" + p); err != nil || n.Port() == 0 {
			return "", "", fmt.Errorf("%q: port %q is not a port number", entry, p)
		}
	} else if strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]") {
		host = e[1 : len(e)-1]
	}
	if host == "" || strings.ContainsAny(host, " []@") {
		return "", "", fmt.Errorf("%q is not a host or host:port (like \"127.0.0.1:8090\" or \"localhost\")", entry)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String(), port, nil
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")), port, nil
}

// RefusedError is a connection the guard refused. Its message names the
// address and the keep.toml line that would allow it.
type RefusedError struct {
	Host string // as the URL named it
	Port string
	IP   string // the address it resolved to
	Why  string // "loopback", "private", …
}

func (e *RefusedError) Error() string {
	at := net.JoinHostPort(e.Host, e.Port)
	if e.IP != "" && e.IP != e.Host {
		at += " (" + e.IP + ")"
	}
	what := "a " + e.Why + " address, reachable only from this machine or its network"
	if e.Why == WhyThisMachine {
		what = "an address of this machine itself (one of its interfaces'), where a service listening on all addresses answers as on 127.0.0.1"
	}
	return fmt.Sprintf("keep refuses to connect to %s: %s; "+
		"if this service is meant to be reached, allow it in keep.toml: [connectors.http] allow = [%q] and restart keep",
		at, what, net.JoinHostPort(e.Host, e.Port))
}

// Refused reports whether err (through any wrapping) is a refusal.
func Refused(err error) (*RefusedError, bool) {
	var r *RefusedError
	ok := errors.As(err, &r)
	return r, ok
}

var (
	cgnat   = netip.MustParsePrefix("100.64.0.0/10")
	thisNet = netip.MustParsePrefix("0.0.0.0/8")
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	// the cloud providers' metadata services (AWS, GCP, Azure, …; AWS's IPv6 one)
	metadataIPs = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}
)

// metadataNames are names of metadata services, refused even through a proxy.
var metadataNames = map[string]bool{"metadata.google.internal": true, "metadata": true, "instance-data": true}

// Internal says why ip may not be dialled ("" when it may).
func Internal(ip netip.Addr) string {
	ip = ip.Unmap()
	if nat64.Contains(ip) { // an IPv4 address reached through NAT64
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, m := range metadataIPs {
		if ip == m {
			return "cloud-metadata"
		}
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified() || thisNet.Contains(ip):
		return "unspecified"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case cgnat.Contains(ip):
		return "carrier-grade NAT (100.64.0.0/10)"
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "multicast or broadcast"
	}
	return ""
}

// allowedName reports whether host:port is allowed by name.
func (g *Guard) allowedName(host, port string) bool {
	if g == nil {
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if ip, err := netip.ParseAddr(h); err == nil {
		h = ip.Unmap().String()
	}
	return g.hosts[h] || g.hostPorts[net.JoinHostPort(h, port)]
}

// check decides about one dialled address, for a connection to host:port.
func (g *Guard) check(host, port string, dialled netip.Addr) error {
	if g.allowedName(host, port) || g.allowedName(dialled.String(), port) {
		return nil
	}
	if why := Internal(dialled); why != "" {
		return &RefusedError{Host: host, Port: port, IP: dialled.Unmap().String(), Why: why}
	}
	if metadataNames[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return &RefusedError{Host: host, Port: port, IP: dialled.String(), Why: "cloud-metadata"}
	}
	if why := g.thisMachine(dialled); why != "" {
		return &RefusedError{Host: host, Port: port, IP: dialled.Unmap().String(), Why: why}
	}
	return nil
}

// DialContext dials like net.Dialer, refusing internal addresses. The
// check runs in the dialer's Control hook, on the very address being
// connected to, after any DNS resolution.
func (g *Guard) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		dd := *d
		dd.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &RefusedError{Host: host, Port: port, IP: address, Why: "unreadable"}
			}
			return g.check(host, port, ap.Addr())
		}
		return dd.DialContext(ctx, network, addr)
	}
}

// Transport returns a transport like base whose every connection passes
// the guard. A request sent through a proxy (HTTPS_PROXY/HTTP_PROXY) is
// dialled by the proxy, so its host is resolved and checked here first.
func (g *Guard) Transport(base *http.Transport) http.RoundTripper {
	return g.TransportConns(base, nil)
}

// TransportConns is Transport with every connection, once dialled and
// checked, handed to wrap (when not nil): the http connector counts the
// bytes each connection sends.
func (g *Guard) TransportConns(base *http.Transport, wrap func(net.Conn) net.Conn) http.RoundTripper {
	t := base.Clone()
	dial := g.DialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	t.DialContext = dial
	if wrap != nil {
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	t.DialTLSContext = nil
	return &proxied{g: g, t: t}
}

type proxied struct {
	g *Guard
	t *http.Transport
}

func (p *proxied) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.t.Proxy != nil {
		if u, err := p.t.Proxy(r); err == nil && u != nil {
			if err := p.g.CheckURL(r.Context(), r.URL); err != nil {
				return nil, err
			}
		}
	}
	return p.t.RoundTrip(r)
}

// CheckURL resolves u's host and refuses it when any of its addresses is
// internal: for requests another program (a proxy) dials.
func (g *Guard) CheckURL(ctx context.Context, u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if g.allowedName(host, port) {
		return nil
	}
	if metadataNames[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return &RefusedError{Host: host, Port: port, Why: "cloud-metadata"}
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if err := g.check(host, port, ip); err != nil {
			return err
		}
	}
	return nil
}
