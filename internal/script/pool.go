package script

import "sync"

// idlePool keeps idle things between invocations — VMs in a process, worker
// processes in keep — least recently used first, at most max of them.
type idlePool[T any] struct {
	mu   sync.Mutex
	max  int
	list []T
}

// take removes and returns the most recently used item that matches.
func (p *idlePool[T]) take(match func(T) bool) (T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.list) - 1; i >= 0; i-- {
		if x := p.list[i]; match(x) {
			p.list = append(p.list[:i], p.list[i+1:]...)
			return x, true
		}
	}
	var zero T
	return zero, false
}

// put keeps x; beyond max it returns the least recently used item, which
// the caller retires.
func (p *idlePool[T]) put(x T) (retired T, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, x)
	if len(p.list) > p.max {
		retired, p.list = p.list[0], p.list[1:]
		return retired, true
	}
	return retired, false
}

// remove takes out every item that matches (all of them when match is nil).
func (p *idlePool[T]) remove(match func(T) bool) []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keep, out []T
	for _, x := range p.list {
		if match == nil || match(x) {
			out = append(out, x)
		} else {
			keep = append(keep, x)
		}
	}
	p.list = keep
	return out
}

// setMax changes the bound; items beyond it are retired as new ones come.
func (p *idlePool[T]) setMax(n int) {
	p.mu.Lock()
	p.max = n
	p.mu.Unlock()
}

// count counts the items that match.
func (p *idlePool[T]) count(match func(T) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, x := range p.list {
		if match(x) {
			n++
		}
	}
	return n
}
