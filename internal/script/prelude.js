// The keep prelude: evaluated once in every sandbox VM, before the workflow
// script. It defines Keep.* and the glue that the host calls; everything a
// script can reach of the host goes through __keep_host, which the Go side
// guards.
//
// A VM serves many invocations, of one script version after another (see
// vmpool.go). What keeps them apart: the script's top level runs again for every invocation
// (it is wrapped in a factory function, so its bindings are new each time);
// the global object and every built-in are frozen (lockdown, below), so no
// invocation can leave anything behind for the next; and every ctx carries
// the number of its invocation (epoch), so a ctx kept from an earlier one
// is refused by the host.
(function () {
  "use strict";
  const host = globalThis.__keep_host;
  const settle = globalThis.__keep_settle;
  const armed = globalThis.__keep_armed;
  const entry = globalThis.__keep_entry;
  // Builtins are captured before the script runs, so a script that replaces
  // them cannot change how keep talks to the host.
  const stringify = JSON.stringify, parse = JSON.parse, keys = Object.keys, isArray = Array.isArray;
  const PromiseC = Promise, resolveP = Promise.resolve.bind(Promise), thenP = Promise.prototype.then;
  const freeze = Object.freeze, getProto = Object.getPrototypeOf, ownKeys = Reflect.ownKeys;
  const getDesc = Object.getOwnPropertyDescriptor, defineProp = Object.defineProperty;
  // The clock and chance a dry run moves (issue 39; Limits.ClockShift,
  // ChanceSeed): set from the spec at every invocation, so they are the
  // real ones (0) unless keep says otherwise. Date.now, Date() and new
  // Date() read the moved clock; Math.random a fixed sequence.
  let clockShift = 0, chance = 0;
  const RealDate = Date, realNow = Date.now, realRandom = Math.random, construct = Reflect.construct;
  const movedNow = () => realNow() + clockShift;
  defineProp(RealDate, "now", { value: function now() { return movedNow(); }, writable: true, configurable: true });
  defineProp(Math, "random", { value: function random() {
    if (chance === 0) return realRandom();
    chance = (chance * 1103515245 + 12345) % 2147483648;
    return chance / 2147483648;
  }, writable: true, configurable: true });
  defineProp(globalThis, "Date", { value: new Proxy(RealDate, {
    construct(t, args, nt) { return construct(t, args.length === 0 && clockShift !== 0 ? [movedNow()] : args, nt); },
    apply(t) { return clockShift === 0 ? t() : String(new t(movedNow())); },
  }), writable: true, configurable: true });
  delete globalThis.__keep_host;
  delete globalThis.__keep_settle;
  delete globalThis.__keep_armed;
  delete globalThis.__keep_entry;
  // The host's entry points below are on the global object, where the host
  // finds them; each first asks the host whether the host is the caller
  // (the answer is true once per host call), so a script that calls one
  // itself, with whatever arguments, gets an error of its own.
  const hostOnly = (name) => {
    if (entry() !== true) throw new TypeError(name + " is keep's own: the host calls it, a script cannot");
  };
  let epoch = 0; // the current invocation; see the top of this file
  let factory; // the script, wrapped: returns what it exports

  const mark = (kind) => function (o) {
    if (o === null || typeof o !== "object") throw new TypeError("Keep." + kind + "(...) expects an object");
    Object.defineProperty(o, "__keepKind", { value: kind });
    return o;
  };
  let definition;
  const Keep = {
    workflow(def) {
      if (def === null || typeof def !== "object") throw new TypeError("Keep.workflow(...) expects an object");
      definition = def;
      return def;
    },
    consumer: mark("consumer"),
    producer: mark("producer"),
    task: mark("task"),
    // A workflow's tests (keep test): plain data, read by __keep_describe.
    test: mark("test"),
  };
  Object.freeze(Keep);
  Object.defineProperty(globalThis, "Keep", { value: Keep, writable: false, configurable: false });

  const callAt = (ep, method, args) => {
    const r = host(method, args === undefined ? "null" : stringify(args), ep);
    // Taken over by the host (a consumer's mutation): the write goes out
    // after mutate ends, so the script goes on with no result (next gets
    // it); a second write or a throw after it fails the run, so nothing the
    // script asked for is dropped unseen.
    if (r === false) return undefined;
    return r === undefined || r === null ? undefined : parse(r);
  };
  const fmt = (v) => {
    if (typeof v === "string") return v;
    try { const s = stringify(v); return s === undefined ? String(v) : s; } catch (e) { return String(v); }
  };
  const logAt = (ep, a) => { let s = ""; for (let i = 0; i < a.length; i++) s += (i ? " " : "") + fmt(a[i]); host("log", stringify(s), ep); };
  const log = (...a) => logAt(epoch, a);
  const cons = Object.freeze({ log, info: log, warn: log, error: log, debug: log });
  Object.defineProperty(globalThis, "console", { value: cons, writable: false, configurable: false });

  // maxDepth is how deep a value a handler returns may nest: keeptype's
  // MaxJSONDepth, put here when the prelude is loaded (sandbox.go).
  const maxDepth = KEEP_MAX_JSON_DEPTH;
  // jsonCheck returns a path to the first value JSON cannot carry faithfully, or "".
  const jsonCheck = (v, path, seen) => {
    const t = typeof v;
    if (v === null || t === "string" || t === "boolean") return "";
    if (t === "number") return Number.isFinite(v) ? "" : path + " is " + v + " (not a JSON number)";
    if (t === "undefined") return path + " is undefined";
    if (t === "function") return path + " is a function";
    if (t === "bigint") return path + " is a BigInt";
    if (t === "symbol") return path + " is a symbol";
    if (seen.includes(v)) return path + " refers back to itself (a cycle)";
    if (seen.length >= maxDepth) return path + " is nested more than " + maxDepth + " levels deep";
    seen.push(v);
    if (isArray(v)) {
      for (let i = 0; i < v.length; i++) { const r = jsonCheck(v[i], path + "[" + i + "]", seen); if (r) return r; }
    } else {
      for (const k of keys(v)) {
        if (v[k] === undefined) continue; // dropped, as JSON.stringify does
        const r = jsonCheck(v[k], path + "." + k, seen); if (r) return r;
      }
    }
    seen.pop();
    return "";
  };

  // outOfMemory tells whether x, thrown while errInfo read an error, is
  // QuickJS's out of memory: its InternalError, or, when QuickJS could not
  // even make that, null or nothing (undefined) — told from a getter that
  // throws either by asking for 64 KiB: when the heap is full, that fails too.
  const InternalErr = InternalError, ArrayBufferC = ArrayBuffer;
  const outOfMemory = (x) => {
    try {
      if (x === null || x === undefined) {
        try { new ArrayBufferC(65536); return false; } catch (y) { return true; }
      }
      return x instanceof InternalErr && x.message === "out of memory";
    } catch (y) {
      return false;
    }
  };

  // errInfo describes what a handler threw. Reading it may itself throw (a
  // message getter that throws, a Proxy): that is said as such, never taken
  // for out of memory unless it is (the heap full, reading the error needs
  // memory too), and never leaves the run unreported.
  const errInfo = (e) => {
    try {
      if (e instanceof Error) return { name: String(e.name), message: String(e.message), stack: String(e.stack || "") };
      return { name: "thrown value", message: fmt(e), stack: "" };
    } catch (x) {
      if (outOfMemory(x)) return { name: "InternalError", message: "out of memory", stack: "" };
      let why = "";
      try { why = String(x && x.message); } catch (y) { why = "?"; }
      return { name: "thrown value", message: "an error whose properties could not be read (a getter or a Proxy threw: " + why + ")", stack: "" };
    }
  };

  // A connector's list may carry properties beside its items (gmail.search's
  // lastCursor); JSON cannot, so the host says it as {"$array": [...], prop}.
  const withProps = (v) => {
    if (v === null || typeof v !== "object" || isArray(v) || !isArray(v["$array"])) return v;
    const out = v["$array"];
    for (const k of keys(v)) if (k !== "$array") out[k] = v[k];
    return out;
  };

  let lastSpecJSON, lastSpec;
  const makeCtx = (spec) => {
    const ep = epoch;
    const call = (method, args) => callAt(ep, method, args);
    const ctx = {};
    // Each connector's object is made when the handler first reaches it:
    // a handler uses one or two of keep's connectors, and making every
    // method's function at every call was most of a call's own cost.
    for (const tool of keys(spec.tools)) {
      const methods = spec.tools[tool] || [];
      let o;
      defineProp(ctx, tool, { enumerable: true, get: () => {
        if (o === undefined) {
          const t = {};
          for (const m of methods) t[m] = async (args) => withProps(call(tool + "." + m, args));
          o = freeze(t);
        }
        return o;
      },
      // A getter alone would answer an assignment with QuickJS's "no setter
      // for property": say what a frozen property says instead.
      set: () => { throw new TypeError("ctx." + tool + " is read-only"); } });
    }
    ctx.log = (...a) => logAt(ep, a);
    ctx.now = () => call("now");
    ctx.random = () => call("random");
    ctx.peek = async (topic, opts) => call("peek", { topic, limit: opts && opts.limit });
    ctx.getByIds = async (topic, ids) => call("getByIds", { topic, ids });
    ctx.registerInput = (o) => call("registerInput", o);
    ctx.publish = async (topics, ev) => call("publish", { topics, event: ev });
    if (spec.task) {
      // withItem (ch 12 §12.2): calls are serialized; a call from inside a
      // handler is nesting, which the host refuses; a handler that throws
      // aborts the run through the host, so the script cannot catch it.
      let chain = resolveP(undefined);
      let running = false;
      ctx.withItem = (id, title, fn) => {
        if (running) return call("item.nested", { id });
        if (typeof fn !== "function") return call("item.badHandler", { id });
        const step = async () => {
          const item = call("item.enter", { id, title });
          const ictx = {};
          for (const k of keys(ctx)) ictx[k] = ctx[k];
          ictx.item = Object.freeze(item);
          ictx.withItem = (id2) => call("item.nested", { id: id2 });
          running = true;
          try {
            await fn(Object.freeze(ictx));
          } catch (e) {
            running = false;
            call("item.fail", errInfo(e));
          }
          running = false;
          call("item.exit", { id });
        };
        const p = thenP.call(chain, step, step);
        chain = p;
        return p;
      };
    }
    return Object.freeze(ctx);
  };

  const handlerOf = (d, kind, name, phase) => {
    const group = kind === "producer" ? d.producers : kind === "consumer" ? d.consumers : kind === "webhook" ? d.webhooks : d.tasks;
    const h = group && group[name];
    if (!h) throw new Error("no " + kind + " named " + name);
    const fn = kind === "producer" || kind === "webhook" ? h.handler : kind === "task" ? h.run : h[phase];
    if (typeof fn !== "function") throw new Error(kind + " " + name + " has no " + phase + " function");
    return fn;
  };

  // load runs the script's top level and returns its workflow definition.
  const load = () => {
    definition = undefined;
    const exported = factory();
    return exported !== undefined ? exported : definition;
  };

  // The host loads a script version into the VM by evaluating its bytecode,
  // which calls __keep_define; only then (armed) is the call accepted, so a
  // script calling it itself changes nothing.
  Object.defineProperty(globalThis, "__keep_define", { value: function (f) {
    if (armed() === true && typeof f === "function") factory = f;
  } });

  Object.defineProperty(globalThis, "__keep_invoke", { value: function (kind, name, phase, argsJSON, specJSON, ep) {
    hostOnly("__keep_invoke");
    epoch = ep;
    // The clock and chance of this invocation, before the script's top
    // level runs again (load).
    if (specJSON !== lastSpecJSON) { lastSpec = parse(specJSON); lastSpecJSON = specJSON; }
    clockShift = lastSpec.clockShift || 0;
    chance = lastSpec.chanceSeed || 0;
    const done = (ok, payload) => settle(ok, payload, ep);
    let d;
    try {
      d = load();
      if (d === null || typeof d !== "object") throw new TypeError("the script does not export a workflow: end it with `export default Keep.workflow({ ... })`");
    } catch (e) {
      const info = errInfo(e);
      info.load = true;
      done(false, stringify(info));
      return;
    }
    let p;
    try {
      const fn = handlerOf(d, kind, name, phase);
      const args = parse(argsJSON);
      // The host sends the same spec nearly every time (the VM's tools):
      // its parse is kept. makeCtx only reads it, and nothing of it
      // reaches the script.
      if (specJSON !== lastSpecJSON) { lastSpec = parse(specJSON); lastSpecJSON = specJSON; }
      p = fn(makeCtx(lastSpec), ...args);
    } catch (e) {
      done(false, stringify(errInfo(e)));
      return;
    }
    const fail = (e) => done(false, stringify(errInfo(e)));
    try {
      thenP.call(resolveP(p), (v) => {
        if (v === undefined) { done(true, ""); return; }
        const bad = jsonCheck(v, "the returned value", []);
        if (bad) { done(false, stringify({ name: "TypeError", message: bad + "; handlers must return plain JSON data", stack: "" })); return; }
        done(true, stringify(v));
      }, fail);
    } catch (e) { fail(e); }
  } });

  // lockdown freezes everything a script can reach that outlives one
  // invocation: the global object, every built-in constructor and
  // prototype, and the intrinsics reachable only through syntax (iterator
  // and generator prototypes, %TypedArray%, %ThrowTypeError%). The few
  // prototype properties that code commonly shadows by assignment
  // (err.name = ..., o.toString = ...) become accessors that define the
  // property on the object assigned to, as an unfrozen prototype would let
  // it (the "override mistake" of frozen prototypes).
  const shadowable = (obj, names) => {
    for (const k of names === "*" ? ownKeys(obj) : names) {
      const d = getDesc(obj, k);
      if (!d || !("value" in d) || !d.writable || !d.configurable) continue;
      const value = d.value;
      defineProp(obj, k, {
        configurable: false, enumerable: d.enumerable,
        get() { return value; },
        set(v) {
          if (this === obj) throw new TypeError("keep: built-ins are shared by every run and cannot be changed (" + String(k) + ")");
          defineProp(this, k, { value: v, writable: true, enumerable: true, configurable: true });
        },
      });
    }
  };
  const harden = (roots) => {
    const seen = new Set();
    const todo = roots.slice();
    const fnProto = Function.prototype, hasOwn = Object.hasOwn;
    while (todo.length) {
      const o = todo.pop();
      if (o === null || (typeof o !== "object" && typeof o !== "function") || seen.has(o)) continue;
      seen.add(o);
      freeze(o);
      // Most of what is reachable are built-in methods: functions with only
      // length and name. Freezing them is enough; listing their properties
      // would double the cost of a new VM.
      if (typeof o === "function" && getProto(o) === fnProto && !hasOwn(o, "prototype") && ownKeys(o).length === 2) continue;
      todo.push(getProto(o));
      for (const k of ownKeys(o)) {
        const d = getDesc(o, k);
        if ("value" in d) {
          const v = d.value;
          if (v !== null && (typeof v === "object" || typeof v === "function")) todo.push(v);
        } else todo.push(d.get, d.set);
      }
    }
  };
  // The prototypes of iterator helpers (%IteratorHelperPrototype%), of
  // Iterator.from's wrapper (%WrapForValidIteratorPrototype%) and of
  // Iterator.concat's result are reachable only by calling them. Left
  // unfrozen, one workflow replaced their next() and read another's data
  // through a shared VM (issue 11); lockdown_test.go walks the whole graph.
  const iteratorIntrinsics = () => {
    if (typeof Iterator !== "function") return [];
    const out = [];
    const probe = { next() { return { done: true, value: undefined }; } };
    const tries = [
      () => Iterator.prototype.map.call([].values(), (x) => x),
      () => Iterator.prototype.drop.call([].values(), 0),
      () => Iterator.from(probe),
      () => Iterator.concat([]),
    ];
    for (const t of tries) {
      try { const o = t(); if (o !== null && typeof o === "object") out.push(getProto(o)); } catch (e) { /* not in this engine */ }
    }
    return out;
  };
  Object.defineProperty(globalThis, "__keep_lockdown", { configurable: true, value: function () {
    delete globalThis.__keep_lockdown;
    // Their callbacks could run during a later invocation.
    delete globalThis.WeakRef;
    delete globalThis.FinalizationRegistry;
    // Only what code assigns on its own objects (a getter on every call of
    // hasOwnProperty or push would slow hot loops down).
    shadowable(Object.prototype, ["constructor", "toString", "valueOf", "toLocaleString"]);
    shadowable(Function.prototype, ["constructor", "name", "toString"]);
    shadowable(Array.prototype, ["constructor", "toString"]);
    shadowable(Promise.prototype, ["constructor"]);
    for (const E of [Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError, typeof AggregateError === "function" ? AggregateError : Error]) {
      shadowable(E.prototype, ["constructor", "name", "message", "toString"]);
    }
    const strictThrower = (function () { "use strict"; const d = getDesc(arguments, "callee"); return d && d.get; })();
    harden([
      globalThis, Function.prototype,
      getProto(function* () {}), getProto(async function () {}), getProto(async function* () {}),
      getProto((function* () {})()), getProto((async function* () {})()),
      getProto([][Symbol.iterator]()), getProto(new Map()[Symbol.iterator]()), getProto(new Set()[Symbol.iterator]()),
      getProto(""[Symbol.iterator]()), getProto(/a/[Symbol.matchAll]("a")), getProto(Int8Array), strictThrower,
      ...iteratorIntrinsics(),
    ]);
  } });

  const list = (v) => Array.isArray(v) ? v.filter((x) => typeof x === "string") : (typeof v === "string" ? [v] : []);
  const fnInfo = (f) => typeof f === "function";
  Object.defineProperty(globalThis, "__keep_describe", { value: function () {
    hostOnly("__keep_describe");
    const d = load();
    if (d === undefined || d === null || typeof d !== "object") return stringify({ missing: true });
    if (d.__keepKind === "test") {
      // A test file is data: what JSON cannot carry (a function) is said,
      // never dropped, so keep test never runs a case other than written.
      const bad = jsonCheck(d, "the test", []);
      return stringify({ test: bad ? null : d, testError: bad, shapeErrors: ["this file is a workflow's test (Keep.test): run it with keep test FILE, and deploy the workflow it names"] });
    }
    const out = { name: d.name, topics: null, topicFrom: {}, producers: {}, consumers: {}, tasks: {}, webhooks: {}, requireApproval: d.requireApproval, shapeErrors: [] };
    if (d.topics !== undefined) {
      if (d.topics === null || typeof d.topics !== "object" || Array.isArray(d.topics)) out.shapeErrors.push("topics must be an object whose keys are topic names");
      else {
        out.topics = Object.keys(d.topics);
        for (const t of out.topics) {
          const o = d.topics[t];
          if (o !== null && typeof o === "object" && o.from !== undefined) out.topicFrom[t] = typeof o.from === "string" ? o.from : "(a " + typeof o.from + ")";
        }
      }
    }
    for (const [group, key] of [["producers", "producers"], ["consumers", "consumers"], ["tasks", "tasks"]]) {
      const g = d[group];
      if (g === undefined) continue;
      if (g === null || typeof g !== "object") { out.shapeErrors.push(group + " must be an object"); continue; }
      for (const name of Object.keys(g)) {
        const h = g[name];
        if (h === null || typeof h !== "object") { out.shapeErrors.push(group + "." + name + " must be an object"); continue; }
        out[key][name] = {
          publishes: list(h.publishes), publishesRaw: h.publishes !== undefined, subscribe: list(h.subscribe),
          schedule: h.schedule === undefined ? null : h.schedule,
          handler: fnInfo(h.handler), prepare: fnInfo(h.prepare), mutate: fnInfo(h.mutate), next: fnInfo(h.next), run: fnInfo(h.run),
        };
      }
    }
    // Webhooks (issue 26): verify and dedupe are plain data, read as JSON
    // (script.WebhookDecl.Parse checks them); the handler is a function.
    if (d.webhooks !== undefined) {
      const g = d.webhooks;
      if (g === null || typeof g !== "object" || isArray(g)) out.shapeErrors.push("webhooks must be an object whose keys are webhook names");
      else for (const name of Object.keys(g)) {
        const h = g[name];
        if (h === null || typeof h !== "object") { out.shapeErrors.push("webhooks." + name + " must be an object"); continue; }
        out.webhooks[name] = {
          publishes: list(h.publishes), publishesRaw: h.publishes !== undefined, handler: fnInfo(h.handler),
          verify: h.verify === undefined ? null : h.verify, dedupe: h.dedupe === undefined ? null : h.dedupe,
        };
      }
    }
    return stringify(out);
  } });
})();
