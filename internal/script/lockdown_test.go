package script

import (
	"strings"
	"testing"
	"time"

	"modernc.org/quickjs"
)

// frozenWalk is run inside a locked-down VM. It walks the object graph from
// the global object and, to find the intrinsics reachable only by calling
// something (iterator helpers, wrapped iterators, regexp string iterators…),
// calls every reachable function with a spread of receivers and arguments and
// walks the prototype chain of whatever comes back. A fresh object a call
// returns belongs to that call and may be unfrozen; everything it inherits
// from is shared by every run of the VM and must be frozen. It returns the
// paths of the shared objects that are not.
const frozenWalk = `(function () {
  const getProto = Object.getPrototypeOf, ownKeys = Reflect.ownKeys, getDesc = Object.getOwnPropertyDescriptor;
  const isObj = (v) => v !== null && (typeof v === "object" || typeof v === "function");
  const seen = new Map(); // object -> path
  const bad = [];
  const fns = [];
  const visit = (o, path) => {
    if (!isObj(o) || seen.has(o)) return;
    seen.set(o, path);
    if (!Object.isFrozen(o)) bad.push(path);
    if (typeof o === "function") fns.push([o, path]);
    visit(getProto(o), path + ".__proto__");
    for (const k of ownKeys(o)) {
      const d = getDesc(o, k);
      const name = path + "." + String(k);
      if ("value" in d) visit(d.value, name); else { visit(d.get, name + "(get)"); visit(d.set, name + "(set)"); }
    }
  };
  visit(globalThis, "globalThis");
  const receivers = () => [undefined, [1, 2], "ab", new Map([[1, 2]]), new Set([1]), /a/g, [1, 2][Symbol.iterator](),
    new Map([[1, 2]]).entries(), { next() { return { done: true }; } }, new Int8Array(2),
    Promise.resolve(1), new ArrayBuffer(8), new Error("x"), {}, () => 1];
  const argLists = [[], [(x) => x], [1], ["a"], [/a/g], [[1, 2]], [{ next() { return { done: true }; } }], [(x) => x, 1]];
  for (let round = 0; round < 2; round++) {
    const list = fns.splice(0);
    for (const [f, path] of list) {
      if (/Function$|\.eval$|Atomics\.wait/.test(path)) continue;
      for (const self of receivers()) for (const args of argLists) {
        let r;
        try { r = f.apply(self, args); } catch (e) { r = e; }
        // The receiver and the arguments are the test's own objects (a
        // method may return them, or use one as a prototype): not shared.
        const mine = new Set([self, ...args]);
        if (isObj(r)) {
          for (let p = getProto(r); isObj(p); p = getProto(p)) if (!mine.has(p)) visit(p, "(" + path + "(…)).__proto__");
          if (typeof r[Symbol.iterator] === "function") {
            try { const it = r[Symbol.iterator](); for (let p = getProto(it); isObj(p); p = getProto(p)) visit(p, "(" + path + "(…))[Symbol.iterator]().__proto__"); } catch (e) {}
          }
        }
        if (r && typeof r.then === "function") { try { r.then(() => {}, () => {}); } catch (e) {} }
      }
    }
  }
  // Syntax-only intrinsics.
  // (A generator object's own prototype is its function's fresh .prototype:
  // the walk starts above it.)
  for (const [o, p] of [[function* () {}, "generator function"], [async function () {}, "async function"],
    [async function* () {}, "async generator function"], [getProto((async function* () {})()), "async generator object"],
    [getProto((function* () {})()), "generator object"], [(function () { return arguments; })(), "arguments"]]) {
    for (let q = getProto(o); isObj(q); q = getProto(q)) visit(q, p + ".__proto__");
  }
  return JSON.stringify({ bad, walked: seen.size });
})()`

// TestEveryIntrinsicIsFrozen fails on any shared object a script can reach
// that the lockdown left unfrozen, so a QuickJS upgrade that adds an
// intrinsic cannot silently reopen the hole of issue 11 (a replaced
// %IteratorHelperPrototype%.next handed one workflow's data to another).
func TestEveryIntrinsicIsFrozen(t *testing.T) {
	t.Parallel()
	v, err := newSandboxVM(std, Limits{Timeout: time.Minute, MemoryLimit: 256 << 20}, forHandlers)
	if err != nil {
		t.Fatal(err)
	}
	defer v.vm.Close()
	out, err := v.vm.Eval(frozenWalk, quickjs.EvalGlobal)
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	s, _ := out.(string)
	if !strings.Contains(s, `"bad":[]`) {
		t.Fatalf("shared objects a script can reach are not frozen: %s", s)
	}
	if !strings.Contains(s, `"walked":`) || strings.Contains(s, `"walked":0`) {
		t.Fatalf("the walk saw nothing: %s", s)
	}
	t.Logf("walk: %s", s)
}
