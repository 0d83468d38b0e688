package netguard

import "net/netip"

// WithMachine makes g take addrs for this machine's own addresses.
func (g *Guard) WithMachine(addrs func() ([]netip.Addr, error)) *Guard {
	g.machine = addrs
	return g
}
