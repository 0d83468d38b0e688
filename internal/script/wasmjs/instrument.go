package wasmjs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// stopExport is the name of the global the instrumented module exports:
// keep sets it to 1 at a call's deadline, and the module traps at its next
// check.
const stopExport = "keep_stop"

// The import every check calls once in yieldEvery passes: a call out to
// Go. Go cannot preempt a goroutine inside wazero's machine code (its
// signal finds no Go function there), so a native loop that calls no
// import would hold its thread: with one P the timer that sets keep_stop
// never runs, and with many a garbage collection's stop-the-world waits
// for the loop while the timer waits for the collection, and keep's whole
// process stands still. In Go, at the import, the goroutine can be
// preempted. keep.interrupted is QuickJS's interrupt handler already (a
// call that reads a flag); its answer is dropped here.
const (
	yieldModule = "keep"
	yieldImport = "interrupted"
	yieldEvery  = 1 << 14
)

// instrument returns module with a stop check — `global.get $keep_stop;
// if; unreachable; end` — at the head of every loop body (where each
// iteration, and so each back-edge, passes) and at the entry of every
// function that can be part of a recursion; $keep_stop is a new mutable
// i32 global, 0 at instantiation, exported as keep_stop, and nothing in the
// module writes it.
//
// Why that is enough to stop any run of the module: a run that checks
// nothing for long either iterates a loop (checked at each iteration) or
// calls functions without end. Calls without a loop are bounded unless the
// call graph has a cycle (a recursion), whose functions are checked at
// entry. The call graph counts `call` edges and, for call_indirect, an
// edge to every function of the same signature that can be in a table
// (element segments, ref.func). Imports are the host's: keep's answer in
// Go and never call back into the module.
//
// The pass decodes the whole code section (every opcode, with the 0xFC,
// 0xFD and 0xFE prefixes) and refuses what it does not know, a body whose
// blocks do not balance, and custom sections that hold code offsets it
// would shift (relocations, DWARF).
func instrument(module []byte) ([]byte, error) {
	m, err := decodeModule(module)
	if err != nil {
		return nil, fmt.Errorf("wasmjs: instrumenting quickjs.wasm: %w", err)
	}
	out, err := m.instrument()
	if err != nil {
		return nil, fmt.Errorf("wasmjs: instrumenting quickjs.wasm: %w", err)
	}
	return out, nil
}

type section struct {
	id   byte
	body []byte
}

type funcType struct{ params, results string }

// body is one function's code: where its instructions start (after the
// locals), the offsets just after each loop's block type, and what it
// calls.
type body struct {
	raw       []byte
	codeStart int
	loops     []int
	calls     []uint32 // function indices
	indirect  []uint32 // type indices of call_indirect
}

type module struct {
	sections      []section
	types         []funcType
	funcTypes     []uint32 // type index of every function, imports first
	importFuncs   int
	importGlobals int
	globals       int // defined in the module
	addressTaken  map[uint32]bool
	bodies        []body
	exportsStop   bool // instrumented already
	yieldFunc     int  // the function index of the import keep.interrupted, -1 if none
}

func decodeModule(b []byte) (*module, error) {
	if len(b) < 8 || !bytes.Equal(b[:8], []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, errors.New("not a WebAssembly 1.0 module")
	}
	m := &module{addressTaken: map[uint32]bool{}, yieldFunc: -1}
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		id := r.byte()
		n := r.u32()
		if r.err != nil || r.off+int(n) > len(b) {
			return nil, fmt.Errorf("section %d at %d: truncated", id, r.off)
		}
		s := section{id: id, body: b[r.off : r.off+int(n)]}
		r.off += int(n)
		m.sections = append(m.sections, s)
		if err := m.decodeSection(s); err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
	}
	return m, nil
}

func (m *module) decodeSection(s section) error {
	r := &reader{b: s.body}
	switch s.id {
	case 0:
		name := r.name()
		if r.err == nil && (name == "linking" || bytes.HasPrefix([]byte(name), []byte("reloc.")) || bytes.HasPrefix([]byte(name), []byte(".debug"))) {
			return fmt.Errorf("custom section %q holds code offsets the pass would shift: link with --strip-all", name)
		}
		return nil // names and producers: indices do not move
	case 1:
		for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
			if r.byte() != 0x60 {
				return errors.New("a type that is not a function type")
			}
			var t funcType
			t.params = string(r.vec(1))
			t.results = string(r.vec(1))
			m.types = append(m.types, t)
		}
	case 2:
		for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
			mod, name := r.name(), r.name()
			switch kind := r.byte(); kind {
			case 0:
				if mod == yieldModule && name == yieldImport {
					m.yieldFunc = m.importFuncs
				}
				m.funcTypes = append(m.funcTypes, r.u32())
				m.importFuncs++
			case 1:
				r.byte()
				r.limits()
			case 2:
				r.limits()
			case 3:
				r.byte()
				r.byte()
				m.importGlobals++
			default:
				return fmt.Errorf("an import of kind %d", kind)
			}
		}
	case 3:
		for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
			m.funcTypes = append(m.funcTypes, r.u32())
		}
	case 6:
		for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
			r.byte()
			r.byte()
			if err := m.constExpr(r); err != nil {
				return err
			}
			m.globals++
		}
	case 7:
		for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
			if r.name() == stopExport {
				m.exportsStop = true
			}
			r.byte()
			r.u32()
		}
	case 9:
		return m.decodeElements(r)
	case 10:
		n := r.u32()
		if int(n) != len(m.funcTypes)-m.importFuncs {
			return fmt.Errorf("%d bodies for %d functions", n, len(m.funcTypes)-m.importFuncs)
		}
		for i := 0; i < int(n) && r.err == nil; i++ {
			size := r.u32()
			if r.err != nil || r.off+int(size) > len(r.b) {
				return fmt.Errorf("body %d: truncated", i)
			}
			bd, err := m.decodeBody(r.b[r.off : r.off+int(size)])
			if err != nil {
				return fmt.Errorf("function %d: %w", m.importFuncs+i, err)
			}
			m.bodies = append(m.bodies, bd)
			r.off += int(size)
		}
	default:
		return nil // tables, memory, start, data, data count: nothing the pass needs
	}
	if r.err == nil && r.off != len(r.b) {
		return fmt.Errorf("%d bytes left over", len(r.b)-r.off)
	}
	return r.err
}

// decodeElements notes every function an element segment puts in a table
// (or declares): call_indirect can reach them.
func (m *module) decodeElements(r *reader) error {
	for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			return fmt.Errorf("an element segment with flags %d", flags)
		}
		if flags&2 != 0 && flags&1 == 0 {
			r.u32() // table index
		}
		if flags&1 == 0 {
			if err := m.constExpr(r); err != nil { // offset
				return err
			}
		}
		if flags&3 != 0 {
			r.byte() // element kind or reference type
		}
		for j, k := 0, r.u32(); j < int(k) && r.err == nil; j++ {
			if flags&4 == 0 {
				m.addressTaken[r.u32()] = true
			} else if err := m.constExpr(r); err != nil {
				return err
			}
		}
	}
	if r.err == nil && r.off != len(r.b) {
		return fmt.Errorf("%d bytes left over", len(r.b)-r.off)
	}
	return r.err
}

// constExpr reads an initializer up to its end, noting ref.func.
func (m *module) constExpr(r *reader) error {
	var bd body
	depth := 0
	for r.err == nil {
		op := r.byte()
		if op == 0x0b {
			return r.err
		}
		if err := m.instr(r, op, &bd, &depth); err != nil {
			return err
		}
	}
	return r.err
}

func (m *module) decodeBody(b []byte) (body, error) {
	r := &reader{b: b}
	bd := body{raw: b}
	for i, n := 0, r.u32(); i < int(n) && r.err == nil; i++ {
		r.u32()
		r.byte()
	}
	bd.codeStart = r.off
	depth := 0
	for r.err == nil && r.off < len(b) {
		op := r.byte()
		switch op {
		case 0x0b:
			depth--
			if depth < 0 {
				if r.off != len(b) {
					return bd, fmt.Errorf("the body's end at %d is not its last byte (%d)", r.off, len(b))
				}
				return bd, nil
			}
			continue
		case 0x03:
			r.blockType()
			bd.loops = append(bd.loops, r.off)
			depth++
			continue
		}
		if err := m.instr(r, op, &bd, &depth); err != nil {
			return bd, fmt.Errorf("at %d: %w", r.off, err)
		}
	}
	if r.err != nil {
		return bd, r.err
	}
	return bd, errors.New("the body has no end")
}

// memarg reads an alignment (with a memory index when its bit 6 says so)
// and an offset.
func (r *reader) memarg() {
	if r.u32()&0x40 != 0 {
		r.u32()
	}
	r.u64()
}

// instr reads op's immediates, noting calls, ref.func and blocks.
func (m *module) instr(r *reader, op byte, bd *body, depth *int) error {
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b || op == 0xd1:
	case op == 0x02 || op == 0x03 || op == 0x04:
		r.blockType()
		*depth++
	case op == 0x0c || op == 0x0d:
		r.u32()
	case op == 0x0e:
		for i, n := 0, r.u32(); i <= int(n) && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x10 || op == 0x12:
		bd.calls = append(bd.calls, r.u32())
	case op == 0x11 || op == 0x13:
		bd.indirect = append(bd.indirect, r.u32())
		r.u32()
	case op == 0x1c:
		r.vec(1)
	case op >= 0x20 && op <= 0x26:
		r.u32()
	case op >= 0x28 && op <= 0x3e:
		r.memarg()
	case op == 0x3f || op == 0x40:
		r.u32()
	case op == 0x41:
		r.s64()
	case op == 0x42:
		r.s64()
	case op == 0x43:
		r.skip(4)
	case op == 0x44:
		r.skip(8)
	case op >= 0x45 && op <= 0xc4:
	case op == 0xd0:
		r.byte()
	case op == 0xd2:
		m.addressTaken[r.u32()] = true
	case op == 0xfc:
		switch sub := r.u32(); {
		case sub <= 7:
		case sub == 8 || sub == 10 || sub == 12 || sub == 14:
			r.u32()
			r.u32()
		case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17):
			r.u32()
		default:
			return fmt.Errorf("unknown opcode 0xfc %d", sub)
		}
	case op == 0xfd:
		switch sub := r.u32(); {
		case sub <= 11 || sub == 92 || sub == 93:
			r.memarg()
		case sub == 12 || sub == 13:
			r.skip(16)
		case sub >= 21 && sub <= 34:
			r.byte()
		case sub >= 84 && sub <= 91:
			r.memarg()
			r.byte()
		case sub <= 0x113:
		default:
			return fmt.Errorf("unknown opcode 0xfd %d", sub)
		}
	case op == 0xfe:
		switch sub := r.u32(); {
		case sub == 3:
			r.byte()
		case sub <= 2 || (sub >= 0x10 && sub <= 0x4e):
			r.memarg()
		default:
			return fmt.Errorf("unknown opcode 0xfe %d", sub)
		}
	default:
		return fmt.Errorf("unknown opcode 0x%02x", op)
	}
	return r.err
}

// recursive tells, for each defined function, whether it is on a cycle of
// the call graph (Tarjan's strongly connected components).
func (m *module) recursive() []bool {
	sig := func(f uint32) funcType { return m.types[m.funcTypes[f]] }
	byType := map[funcType][]uint32{}
	for f := range m.addressTaken {
		if int(f) >= m.importFuncs && int(f) < len(m.funcTypes) {
			byType[sig(f)] = append(byType[sig(f)], f)
		}
	}
	succ := func(i int) []int {
		var s []int
		for _, f := range m.bodies[i].calls {
			if int(f) >= m.importFuncs {
				s = append(s, int(f)-m.importFuncs)
			}
		}
		for _, t := range m.bodies[i].indirect {
			for _, f := range byType[m.types[t]] {
				s = append(s, int(f)-m.importFuncs)
			}
		}
		return s
	}
	n := len(m.bodies)
	index, low := make([]int, n), make([]int, n)
	onStack, rec := make([]bool, n), make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range succ(v) {
			if w == v {
				rec[v] = true
			}
			if index[w] < 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var scc []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == v {
					break
				}
			}
			if len(scc) > 1 {
				for _, w := range scc {
					rec[w] = true
				}
			}
		}
	}
	for v := range n {
		if index[v] < 0 {
			visit(v)
		}
	}
	return rec
}

// instrument writes the module with the checks, the global and its export.
func (m *module) instrument() ([]byte, error) {
	if m.exportsStop {
		return nil, errors.New("the module already exports " + stopExport)
	}
	check, err := m.check()
	if err != nil {
		return nil, err
	}
	stop := uint32(m.importGlobals + m.globals)
	rec := m.recursive()
	global := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b} // mut i32 = i32.const 0
	global = append(global, 0x7f, 0x01, 0x41)      // and $tick, mut i32 = yieldEvery
	global = append(appendSleb(global, yieldEvery), 0x0b)
	export := append(append(uleb(uint64(len(stopExport))), stopExport...), append([]byte{0x03}, uleb(uint64(stop))...)...)
	out := []byte("\x00asm\x01\x00\x00\x00")
	put := func(id byte, b []byte) {
		out = append(out, id)
		out = append(out, uleb(uint64(len(b)))...)
		out = append(out, b...)
	}
	sawGlobals, sawExports := false, false
	for _, s := range m.sections {
		switch s.id {
		case 6:
			sawGlobals = true
			put(6, appendEntries(s.body, 2, global))
			continue
		case 7:
			if !sawGlobals {
				put(6, appendEntries([]byte{0}, 2, global))
				sawGlobals = true
			}
			sawExports = true
			put(7, appendEntry(s.body, export))
			continue
		case 10:
			var code []byte
			code = append(code, uleb(uint64(len(m.bodies)))...)
			for i, bd := range m.bodies {
				var nb []byte
				nb = append(nb, bd.raw[:bd.codeStart]...)
				if rec[i] {
					nb = append(nb, check...)
				}
				last := bd.codeStart
				for _, at := range bd.loops {
					nb = append(nb, bd.raw[last:at]...)
					nb = append(nb, check...)
					last = at
				}
				nb = append(nb, bd.raw[last:]...)
				code = append(code, uleb(uint64(len(nb)))...)
				code = append(code, nb...)
			}
			put(10, code)
			continue
		}
		if s.id > 7 && !sawExports {
			// Known sections come in a fixed order, exports (7) before
			// start, elements, data count, code and data: a new one goes
			// before the first of those.
			if !sawGlobals {
				put(6, appendEntries([]byte{0}, 2, global))
				sawGlobals = true
			}
			put(7, appendEntry([]byte{0}, export))
			sawExports = true
		}
		put(s.id, s.body)
	}
	if !sawExports {
		return nil, errors.New("the module has no code")
	}
	return out, nil
}

// check is the code inserted at each loop head and recursive function's
// entry: every yieldEvery passes, a call out to Go (the import
// keep.interrupted, its answer dropped), then the test of keep_stop:
//
//	global.get $tick; i32.eqz; if; i32.const yieldEvery; global.set $tick; call $yield; drop; end
//	global.get $tick; i32.const 1; i32.sub; global.set $tick
//	global.get $keep_stop; if; unreachable; end
//
// $keep_stop and $tick are the two globals the pass appends, in that order.
func (m *module) check() ([]byte, error) {
	if m.yieldFunc < 0 || m.types[m.funcTypes[m.yieldFunc]] != (funcType{results: "\x7f"}) {
		return nil, errors.New("the module does not import " + yieldModule + "." + yieldImport + " as a function () -> i32")
	}
	stop := uint32(m.importGlobals + m.globals)
	tick := stop + 1
	var check []byte
	check = append(append(check, 0x23), uleb(uint64(tick))...)
	check = appendSleb(append(check, 0x45, 0x04, 0x40, 0x41), yieldEvery)
	check = append(append(check, 0x24), uleb(uint64(tick))...)
	check = append(append(check, 0x10), uleb(uint64(m.yieldFunc))...)
	check = append(check, 0x1a, 0x0b)
	check = append(append(check, 0x23), uleb(uint64(tick))...)
	check = append(check, 0x41, 0x01, 0x6b)
	check = append(append(check, 0x24), uleb(uint64(tick))...)
	check = append(append(check, 0x23), uleb(uint64(stop))...)
	return append(check, 0x04, 0x40, 0x00, 0x0b), nil
}

// appendEntry adds one entry to a section that is a vector.
func appendEntry(vec, entry []byte) []byte { return appendEntries(vec, 1, entry) }

// appendEntries adds k entries, in entries, to a section that is a vector.
func appendEntries(vec []byte, k int, entries []byte) []byte {
	r := &reader{b: vec}
	n := r.u32()
	out := uleb(uint64(n) + uint64(k))
	out = append(out, vec[r.off:]...)
	return append(out, entries...)
}

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

// appendSleb appends v as a signed LEB128 (i32.const's immediate).
func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// reader reads the binary format; the first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s at %d", what, r.off)
	}
	r.off = len(r.b)
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) skip(n int) {
	if r.err != nil || r.off+n > len(r.b) {
		r.fail("truncated")
		return
	}
	r.off += n
}

func (r *reader) leb(max int) uint64 {
	var v uint64
	for shift := 0; shift < max; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("a LEB128 too long")
	return 0
}

func (r *reader) u32() uint32 { return uint32(r.leb(35)) }
func (r *reader) u64() uint64 { return r.leb(70) }
func (r *reader) s64()        { r.leb(70) }

func (r *reader) vec(elem int) []byte {
	n := int(r.u32())
	start := r.off
	r.skip(n * elem)
	if r.err != nil {
		return nil
	}
	return r.b[start:r.off]
}

func (r *reader) name() string { return string(r.vec(1)) }

func (r *reader) limits() {
	flags := r.byte()
	if flags > 7 {
		r.fail("limits")
		return
	}
	r.u64()
	if flags&1 != 0 {
		r.u64()
	}
}

// blockType reads a block type: empty (0x40), a value type (one byte), or
// a type index (a signed LEB128).
func (r *reader) blockType() {
	if r.off < len(r.b) {
		switch c := r.b[r.off]; {
		case c == 0x40 || (c >= 0x7b && c <= 0x7f) || c == 0x70 || c == 0x6f:
			r.off++
			return
		}
	}
	r.leb(35)
}
