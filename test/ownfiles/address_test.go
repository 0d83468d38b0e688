package ownfiles

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keep-run/keep/internal/netguard"
)

// machineAddr is an address of this machine's interfaces that no private
// range names (192.0.2.2 on this project's CI machine), or why there is none.
func machineAddr() (netip.Addr, string) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, "this machine's interfaces cannot be read: " + err.Error()
	}
	var seen []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				seen = append(seen, ip.Unmap().String())
				if netguard.Internal(ip.Unmap()) == "" {
					return ip.Unmap(), ""
				}
			}
		}
	}
	return netip.Addr{}, "every address of this machine's interfaces (" + strings.Join(seen, ", ") + ") is in a range refused already; " +
		"internal/netguard's TestThisMachinesAddressesAreReadAtEachCheck checks the rule with addresses given to it"
}

// TestAWorkflowCannotReachThisMachineByItsOwnAddress: a service listening
// on all addresses of this machine, reached by a workflow through the
// machine's own public address (issue 38 #6: it was reached, since only
// loopback and private ranges were refused): the run waits for a person
// with the keep.toml line to add, the service hears nothing; allowed in
// keep.toml, the request goes.
func TestAWorkflowCannotReachThisMachineByItsOwnAddress(t *testing.T) {
	ip, why := machineAddr()
	if why != "" {
		t.Skip(why)
	}
	var posts atomic.Int64
	l, err := net.Listen("tcp", ":0") // every address of this machine
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) })}
	go srv.Serve(l)
	defer srv.Close()
	at := net.JoinHostPort(ip.String(), strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	script := `export default Keep.workflow({ name: "caller", topics: { t: {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "call" })
    await ctx.publish("t", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["t"],
    async prepare(ctx) { const [e] = await ctx.peek("t"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "t", ids: [e.messageId] }], data: {} } },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "http://` + at + `/admin", json: { act: "now" } }) },
  }) },
})`
	for _, allowed := range []bool{false, true} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(script), 0o644)
		if allowed {
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.http]\nallow = [%q]\n", at)), 0o644)
		}
		code, out := run(t, dir, "run", "workflow.js")
		switch {
		case !allowed && (code != 3 || !strings.Contains(out, "an address of this machine itself") || !strings.Contains(out, fmt.Sprintf(`allow = [%q]`, at))):
			t.Fatalf("keep run toward %s exited %d; want it blocked, saying it is this machine's own address and what to allow:\n%s", at, code, out)
		case !allowed && posts.Load() != 0:
			t.Fatalf("the service heard %d request(s)", posts.Load())
		case allowed && (code != 0 || posts.Load() != 1):
			t.Fatalf("allowed in keep.toml: keep run exited %d, the service heard %d request(s):\n%s", code, posts.Load(), out)
		}
	}
}
