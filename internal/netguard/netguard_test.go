package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keep-run/keep/internal/netguard"
)

func TestInternalAddresses(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "127.9.9.9": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "172.31.255.255": "private", "192.168.1.1": "private", "fd12::1": "private",
		"169.254.169.254": "cloud-metadata", "fd00:ec2::254": "cloud-metadata", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"0.0.0.0": "unspecified", "::": "unspecified", "0.1.2.3": "unspecified",
		"100.64.0.1": "carrier-grade NAT (100.64.0.0/10)", "100.127.255.254": "carrier-grade NAT (100.64.0.0/10)",
		"64:ff9b::7f00:1": "loopback", // 127.0.0.1 through NAT64
		"239.1.2.3":       "multicast or broadcast", "255.255.255.255": "multicast or broadcast",
		"93.184.215.14": "", "8.8.8.8": "", "100.63.255.255": "", "100.128.0.1": "", "172.32.0.1": "", "2606:4700::1111": "",
	} {
		if got := netguard.Internal(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

func TestParseAllowEntries(t *testing.T) {
	for entry, want := range map[string]string{"127.0.0.1:8090": "127.0.0.1 8090", "LocalHost": "localhost ", "[::1]:9000": "::1 9000", "[::1]": "::1 ", "db.internal.": "db.internal "} {
		h, p, err := netguard.Parse(entry)
		if err != nil || h+" "+p != want {
			t.Errorf("%q: %q %q %v, want %q", entry, h, p, err, want)
		}
	}
	for _, bad := range []string{"", "http://127.0.0.1:8090", "127.0.0.1:8090/x", "127.0.0.1:http", "127.0.0.1:0", "a b", "user@host"} {
		if _, _, err := netguard.Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// server counts the requests it gets.
func server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s, &n
}

func client(allow ...string) *http.Client {
	return &http.Client{Transport: netguard.New(allow).Transport(http.DefaultTransport.(*http.Transport))}
}

// The guard checks the address dialled: a name that resolves to loopback
// (as a rebinding name would when dialled) is refused like the IP itself,
// and the refusal names the keep.toml line to add.
func TestRefusesLoopbackByIPAndByName(t *testing.T) {
	s, n := server(t, nil)
	port := s.Listener.Addr().(*net.TCPAddr).Port
	for _, u := range []string{s.URL, strings.Replace(s.URL, "127.0.0.1", "localhost", 1), strings.Replace(s.URL, "127.0.0.1", "[::ffff:127.0.0.1]", 1)} {
		_, err := client().Get(u)
		r, ok := netguard.Refused(err)
		if !ok || r.Why != "loopback" {
			t.Fatalf("%s: %v", u, err)
		}
		if !strings.Contains(err.Error(), `[connectors.http] allow = ["`) || !strings.Contains(err.Error(), ":"+strconv.Itoa(port)) {
			t.Fatalf("the error does not say what to add: %v", err)
		}
	}
	if n.Load() != 0 {
		t.Fatalf("the server got %d requests", n.Load())
	}
}

func TestAllowByHostPortAndByHost(t *testing.T) {
	s, n := server(t, nil)
	other, m := server(t, nil)
	host := s.Listener.Addr().String()
	if _, err := client(host).Get(s.URL); err != nil {
		t.Fatalf("allowed host:port refused: %v", err)
	}
	if _, err := client(host).Get(other.URL); err == nil {
		t.Fatalf("host:port allowed another port")
	}
	if _, err := client("127.0.0.1").Get(other.URL); err != nil {
		t.Fatalf("a host alone must allow all its ports: %v", err)
	}
	// An allowed name is allowed whatever it resolves to.
	if _, err := client("localhost").Get(strings.Replace(s.URL, "127.0.0.1", "localhost", 1)); err != nil {
		t.Fatalf("allowed name refused: %v", err)
	}
	if n.Load() != 2 || m.Load() != 1 {
		t.Fatalf("requests %d %d", n.Load(), m.Load())
	}
}

// A redirect from an allowed service to one that is not is refused when
// the redirect is dialled: every connection passes the guard.
func TestRedirectsAreCheckedAgain(t *testing.T) {
	inner, n := server(t, nil)
	outer, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/secret", http.StatusFound)
	})
	_, err := client(outer.Listener.Addr().String()).Get(outer.URL)
	if _, ok := netguard.Refused(err); !ok {
		t.Fatalf("redirect to a loopback address: %v", err)
	}
	if n.Load() != 0 {
		t.Fatalf("the redirect reached the service nobody allowed")
	}
}

// A request sent through a proxy is dialled by the proxy: its host is
// resolved and checked before it goes.
func TestProxiedRequestsAreChecked(t *testing.T) {
	proxy, n := server(t, nil)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	pu, _ := http.NewRequest("GET", proxy.URL, nil)
	tr.Proxy = func(*http.Request) (*url.URL, error) { return pu.URL, nil }
	c := &http.Client{Transport: netguard.New([]string{proxy.Listener.Addr().String()}).Transport(tr)}
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/computeMetadata/v1/", "http://10.0.0.1/"} {
		_, err := c.Get(target)
		if _, ok := netguard.Refused(err); !ok {
			t.Fatalf("%s through a proxy: %v", target, err)
		}
	}
	if n.Load() != 0 {
		t.Fatalf("the proxy got %d requests", n.Load())
	}
	if err := netguard.New(nil).CheckURL(context.Background(), pu.URL); err == nil {
		t.Fatalf("CheckURL allowed a loopback URL")
	}
}

// publicInterfaceAddr is an address of one of this machine's interfaces
// that no range of Internal names (192.0.2.2 on this project's CI
// machine), or "" with why there is none.
func publicInterfaceAddr(t *testing.T) (netip.Addr, string) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, "this machine's interfaces cannot be read: " + err.Error()
	}
	var seen []string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		seen = append(seen, ip.String())
		if netguard.Internal(ip) == "" {
			return ip, ""
		}
	}
	return netip.Addr{}, "every address of this machine's interfaces is in a range the guard refused already (" + strings.Join(seen, ", ") +
		"); TestThisMachinesAddressesAreReadAtEachCheck checks the rule with addresses given to it"
}

// A service listening on all addresses, reached through an address of
// this machine's interfaces outside every private range (its public
// address), is refused as this machine's own, unless keep.toml allows it
// (issue 38 #6: it was reached).
func TestThisMachinesPublicAddressIsRefused(t *testing.T) {
	ip, why := publicInterfaceAddr(t)
	if why != "" {
		t.Skip(why)
	}
	var n atomic.Int64
	l, err := net.Listen("tcp", ":0") // all addresses
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) })}
	go s.Serve(l)
	defer s.Close()
	at := net.JoinHostPort(ip.String(), strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	_, err = client().Get("http://" + at + "/")
	r, ok := netguard.Refused(err)
	if !ok || r.Why != netguard.WhyThisMachine || !strings.Contains(err.Error(), "this machine itself") || !strings.Contains(err.Error(), `allow = ["`+at+`"]`) {
		t.Fatalf("%s, an address of this machine: %v", at, err)
	}
	if n.Load() != 0 {
		t.Fatalf("the service got %d requests", n.Load())
	}
	if _, err := client(at).Get("http://" + at + "/"); err != nil {
		t.Fatalf("allowed in keep.toml, still refused: %v", err)
	}
	if n.Load() != 1 {
		t.Fatalf("the allowed request: %d requests", n.Load())
	}
}

// The rule, with the machine's addresses given: an address of this
// machine in no private range is refused (also as an IPv4-mapped IPv6
// address), an address added since the last check is refused at the next
// one (nothing is cached), an allowed one passes, and when the addresses
// cannot be read no address is dialled.
func TestThisMachinesAddressesAreReadAtEachCheck(t *testing.T) {
	var added atomic.Bool
	machine := func() ([]netip.Addr, error) {
		addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("203.0.113.9")}
		if added.Load() {
			addrs = append(addrs, netip.MustParseAddr("2001:db8::7"))
		}
		return addrs, nil
	}
	g := netguard.New(nil).WithMachine(machine)
	ctx := context.Background()
	check := func(g *netguard.Guard, raw string) error {
		u, _ := url.Parse(raw)
		return g.CheckURL(ctx, u)
	}
	for _, u := range []string{"http://203.0.113.9/", "http://[::ffff:203.0.113.9]:8080/"} {
		if r, ok := netguard.Refused(check(g, u)); !ok || r.Why != netguard.WhyThisMachine {
			t.Errorf("%s: %v", u, check(g, u))
		}
	}
	if err := check(g, "http://[2001:db8::7]/"); err != nil {
		t.Fatalf("not yet this machine's: %v", err)
	}
	added.Store(true)
	if r, ok := netguard.Refused(check(g, "http://[2001:db8::7]/")); !ok || r.Why != netguard.WhyThisMachine {
		t.Fatalf("an address added since the last check: %v", check(g, "http://[2001:db8::7]/"))
	}
	if err := check(g, "http://203.0.113.10/"); err != nil {
		t.Fatalf("another machine's address: %v", err)
	}
	if err := check(netguard.New([]string{"203.0.113.9:8080"}).WithMachine(machine), "http://203.0.113.9:8080/"); err != nil {
		t.Fatalf("allowed in keep.toml: %v", err)
	}
	broken := netguard.New(nil).WithMachine(func() ([]netip.Addr, error) { return nil, errors.New("netlink: permission denied") })
	if _, ok := netguard.Refused(check(broken, "http://203.0.113.10/")); !ok {
		t.Fatalf("addresses unknown, dialled anyway")
	}
}
