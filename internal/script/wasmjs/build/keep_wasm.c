/*
 * keep_wasm.c: the entry points keep calls in a QuickJS WebAssembly
 * instance (issue 43). One instance holds one runtime and one context: one
 * workflow's scripts. Everything crosses the boundary as bytes in the
 * instance's linear memory: keep writes a script or a JSON argument into a
 * buffer it got from keep_alloc, calls keep_eval or keep_call, and reads the
 * answer (JSON, or an error's message) at keep_out_ptr/keep_out_len.
 *
 * The only way out of the instance is the import keep.host: the script's
 * __keep_host(method, json) asks keep and gets a JSON string back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "quickjs.h"

#define EXPORT(name) __attribute__((export_name(name)))
#define IMPORT(name) __attribute__((import_module("keep"), import_name(name)))

/* host asks keep: it returns the answer's length (>= 0) or, for an error,
   -1 - the length of its message; host_take then copies it to dst. */
IMPORT("host") int32_t keep_host(const char *method, uint32_t method_len, const char *args, uint32_t args_len);
IMPORT("host_take") void keep_host_take(char *dst);
/* interrupted asks keep whether to stop the script now: QuickJS asks it
   at intervals, and an interruption is an exception no script can catch. */
IMPORT("interrupted") int32_t keep_interrupted(void);

static int interrupt_handler(JSRuntime *r, void *opaque)
{
    (void)r;
    (void)opaque;
    return keep_interrupted();
}

static JSRuntime *rt;
static JSContext *ctx;
static char *out;
static uint32_t out_len;

static void set_out(const char *s, size_t n)
{
    free(out);
    out = malloc(n + 1);
    if (!out) {
        out_len = 0;
        return;
    }
    memcpy(out, s, n);
    out[n] = 0;
    out_len = (uint32_t)n;
}

/* set_exception puts the pending exception's text (and stack) in out. */
static void set_exception(void)
{
    JSValue e = JS_GetException(ctx);
    const char *s = JS_ToCString(ctx, e);
    JSValue st = JS_UNDEFINED;
    const char *stack = NULL;
    if (JS_IsError(ctx, e)) {
        st = JS_GetPropertyStr(ctx, e, "stack");
        if (!JS_IsUndefined(st))
            stack = JS_ToCString(ctx, st);
    }
    if (s && stack && *stack) {
        size_t a = strlen(s), b = strlen(stack);
        char *m = malloc(a + b + 2);
        if (m) {
            memcpy(m, s, a);
            m[a] = '\n';
            memcpy(m + a + 1, stack, b + 1);
            set_out(m, a + b + 1);
            free(m);
        } else {
            set_out(s, a);
        }
    } else if (s) {
        set_out(s, strlen(s));
    } else {
        /* the exception could not even be made a string: out of memory */
        set_out("InternalError: out of memory", 28);
    }
    if (stack)
        JS_FreeCString(ctx, stack);
    if (s)
        JS_FreeCString(ctx, s);
    JS_FreeValue(ctx, st);
    JS_FreeValue(ctx, e);
}

static JSValue js_keep_host(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv)
{
    size_t ml, al;
    const char *m, *a;
    int32_t n;
    char *buf;
    JSValue r;
    if (argc < 2)
        return JS_ThrowTypeError(c, "__keep_host takes a method and its JSON arguments");
    m = JS_ToCStringLen(c, &ml, argv[0]);
    if (!m)
        return JS_EXCEPTION;
    a = JS_ToCStringLen(c, &al, argv[1]);
    if (!a) {
        JS_FreeCString(c, m);
        return JS_EXCEPTION;
    }
    n = keep_host(m, (uint32_t)ml, a, (uint32_t)al);
    JS_FreeCString(c, m);
    JS_FreeCString(c, a);
    {
        int32_t len = n >= 0 ? n : -1 - n;
        buf = malloc((size_t)len + 1);
        if (!buf)
            return JS_ThrowOutOfMemory(c);
        keep_host_take(buf);
        buf[len] = 0;
        if (n >= 0)
            r = JS_NewStringLen(c, buf, (size_t)len);
        else
            r = JS_ThrowInternalError(c, "%s", buf);
        free(buf);
    }
    return r;
}

EXPORT("keep_alloc") void *keep_alloc(uint32_t n) { return malloc(n ? n : 1); }
EXPORT("keep_free") void keep_free(void *p) { free(p); }
EXPORT("keep_out_ptr") char *keep_out_ptr(void) { return out; }
EXPORT("keep_out_len") uint32_t keep_out_len(void) { return out_len; }

/* QuickJS's own allocator (js_def_* in quickjs.c, which it does not
   export), but for oom: set when the heap's limit (or malloc) refused an
   allocation, so that keep fails the invocation as out of memory whatever
   the script caught (issue 10 #11), as a worker's memory watch does.
   keep_oom reads and clears it. */
#define KEEP_MALLOC_OVERHEAD 8 /* quickjs.c's MALLOC_OVERHEAD */
static int oom;

static void *keep_js_malloc(JSMallocState *s, size_t size)
{
    void *p;
    if (s->malloc_size + size > s->malloc_limit) {
        oom = 1;
        return NULL;
    }
    p = malloc(size);
    if (!p) {
        oom = 1;
        return NULL;
    }
    s->malloc_count++;
    s->malloc_size += malloc_usable_size(p) + KEEP_MALLOC_OVERHEAD;
    return p;
}

static void keep_js_free(JSMallocState *s, void *p)
{
    if (!p)
        return;
    s->malloc_count--;
    s->malloc_size -= malloc_usable_size(p) + KEEP_MALLOC_OVERHEAD;
    free(p);
}

static void *keep_js_realloc(JSMallocState *s, void *p, size_t size)
{
    size_t old;
    if (!p)
        return size == 0 ? NULL : keep_js_malloc(s, size);
    old = malloc_usable_size(p);
    if (size == 0) {
        s->malloc_count--;
        s->malloc_size -= old + KEEP_MALLOC_OVERHEAD;
        free(p);
        return NULL;
    }
    if (s->malloc_size + size - old > s->malloc_limit) {
        oom = 1;
        return NULL;
    }
    p = realloc(p, size);
    if (!p) {
        oom = 1;
        return NULL;
    }
    s->malloc_size += malloc_usable_size(p) - old;
    return p;
}

static size_t keep_js_usable_size(const void *p)
{
    return malloc_usable_size((void *)p);
}

static const JSMallocFunctions keep_malloc_funcs = {
    keep_js_malloc, keep_js_free, keep_js_realloc, keep_js_usable_size,
};

/* keep_oom: 1 if an allocation was refused since the last keep_oom. */
EXPORT("keep_oom") int32_t keep_oom(void)
{
    int32_t r = oom;
    oom = 0;
    return r;
}

/* keep_init makes the runtime and its context. heap bounds QuickJS's own
   allocations (below the linear memory's bound, which holds whatever
   QuickJS misses); stack bounds the script's recursion. 0 on success. */
EXPORT("keep_init") int32_t keep_init(uint32_t heap, uint32_t stack)
{
    JSValue g;
    rt = JS_NewRuntime2(&keep_malloc_funcs, NULL);
    if (!rt)
        return 1;
    if (heap)
        JS_SetMemoryLimit(rt, heap);
    JS_SetMaxStackSize(rt, stack);
    JS_SetCanBlock(rt, 0);
    JS_SetInterruptHandler(rt, interrupt_handler, NULL);
    ctx = JS_NewContext(rt);
    if (!ctx)
        return 1;
    g = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, g, "__keep_host", JS_NewCFunction(ctx, js_keep_host, "__keep_host", 2));
    JS_FreeValue(ctx, g);
    return 0;
}

/* keep_eval runs src as a global script. 0 on success; 1 with the
   exception's text in out. */
EXPORT("keep_eval") int32_t keep_eval(const char *src, uint32_t len, const char *file, uint32_t file_len)
{
    char name[256];
    size_t n = file_len < sizeof(name) - 1 ? file_len : sizeof(name) - 1;
    JSValue v;
    memcpy(name, file, n);
    name[n] = 0;
    v = JS_Eval(ctx, src, len, name, JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(v)) {
        set_exception();
        return 1;
    }
    JS_FreeValue(ctx, v);
    return 0;
}

/* settle runs the pending jobs until v, if a promise, is settled, and
   returns its value (or throws its reason). */
static JSValue settle(JSValue v)
{
    JSContext *c1;
    for (;;) {
        int r, state;
        if (!JS_IsObject(v))
            return v;
        /* -1 for what is not a promise; the enum is unsigned, so as int */
        state = (int)JS_PromiseState(ctx, v);
        if (state < 0)
            return v;
        switch (state) {
        case JS_PROMISE_FULFILLED: {
            JSValue r2 = JS_PromiseResult(ctx, v);
            JS_FreeValue(ctx, v);
            return r2;
        }
        case JS_PROMISE_REJECTED: {
            JSValue r2 = JS_PromiseResult(ctx, v);
            JS_FreeValue(ctx, v);
            return JS_Throw(ctx, r2);
        }
        default:
            break;
        }
        r = JS_ExecutePendingJob(rt, &c1);
        if (r < 0) {
            JS_FreeValue(ctx, v);
            return JS_EXCEPTION;
        }
        if (r == 0) {
            JS_FreeValue(ctx, v);
            return JS_ThrowInternalError(ctx, "the handler's promise never settles: it awaits something nothing will resolve");
        }
    }
}

/* keep_call calls the global function name with one argument, the JSON
   arg, waits for its promise if it returns one, and puts the JSON of the
   value in out. 0 on success; 1 with the exception's text in out. */
static int32_t call(const char *name, uint32_t name_len, const char *arg, uint32_t arg_len, int spread, int wait);

EXPORT("keep_call") int32_t keep_call(const char *name, uint32_t name_len, const char *arg, uint32_t arg_len)
{
    return call(name, name_len, arg, arg_len, 0, 1);
}

/* keep_apply calls the global function name with the elements of the JSON
   array args as its arguments, and puts the JSON of what it returns in out
   (a promise is not waited for: keep_jobs runs the jobs). */
EXPORT("keep_apply") int32_t keep_apply(const char *name, uint32_t name_len, const char *args, uint32_t args_len)
{
    return call(name, name_len, args, args_len, 1, 0);
}

/* keep_jobs runs pending promise jobs until none is left, or max of them
   (0: no cap; the host then asks again or ends an endless chain): the
   number run, or -1 - that number with the exception of the job that threw
   in out. */
EXPORT("keep_jobs") int32_t keep_jobs(uint32_t max)
{
    JSContext *c1;
    int32_t n = 0;
    for (;;) {
        int r;
        if (max && (uint32_t)n >= max)
            return n;
        r = JS_ExecutePendingJob(rt, &c1);
        if (r == 0)
            return n;
        if (r < 0) {
            set_exception();
            return -1 - n;
        }
        n++;
    }
}

static int32_t call(const char *name, uint32_t name_len, const char *arg, uint32_t arg_len, int spread, int wait)
{
    char fname[256];
    size_t n = name_len < sizeof(fname) - 1 ? name_len : sizeof(fname) - 1;
    JSValue g, f, a, v, s;
    memcpy(fname, name, n);
    fname[n] = 0;
    g = JS_GetGlobalObject(ctx);
    f = JS_GetPropertyStr(ctx, g, fname);
    JS_FreeValue(ctx, g);
    if (JS_IsException(f)) {
        set_exception();
        return 1;
    }
    if (!JS_IsFunction(ctx, f)) {
        JS_FreeValue(ctx, f);
        JS_ThrowTypeError(ctx, "%s is not a function", fname);
        set_exception();
        return 1;
    }
    a = JS_ParseJSON(ctx, arg, arg_len, "<argument>");
    if (JS_IsException(a)) {
        JS_FreeValue(ctx, f);
        set_exception();
        return 1;
    }
    if (spread) {
        /* the arguments are the array's elements */
        JSValue argv[16];
        int64_t argc = 0, i;
        JSValue len = JS_GetPropertyStr(ctx, a, "length");
        int bad = JS_ToInt64(ctx, &argc, len) < 0;
        JS_FreeValue(ctx, len);
        if (bad || argc > 16) {
            JS_FreeValue(ctx, f);
            JS_FreeValue(ctx, a);
            if (argc > 16)
                JS_ThrowRangeError(ctx, "at most 16 arguments");
            set_exception();
            return 1;
        }
        for (i = 0; i < argc; i++)
            argv[i] = JS_GetPropertyUint32(ctx, a, (uint32_t)i);
        v = JS_Call(ctx, f, JS_UNDEFINED, (int)argc, (JSValueConst *)argv);
        for (i = 0; i < argc; i++)
            JS_FreeValue(ctx, argv[i]);
    } else {
        v = JS_Call(ctx, f, JS_UNDEFINED, 1, (JSValueConst *)&a);
    }
    JS_FreeValue(ctx, f);
    JS_FreeValue(ctx, a);
    if (JS_IsException(v)) {
        set_exception();
        return 1;
    }
    if (wait)
        v = settle(v);
    if (JS_IsException(v)) {
        set_exception();
        return 1;
    }
    s = JS_JSONStringify(ctx, v, JS_UNDEFINED, JS_UNDEFINED);
    JS_FreeValue(ctx, v);
    if (JS_IsException(s)) {
        set_exception();
        return 1;
    }
    if (JS_IsUndefined(s)) {
        set_out("null", 4);
    } else {
        size_t sl;
        const char *p = JS_ToCStringLen(ctx, &sl, s);
        if (!p) {
            JS_FreeValue(ctx, s);
            set_exception();
            return 1;
        }
        set_out(p, sl);
        JS_FreeCString(ctx, p);
    }
    JS_FreeValue(ctx, s);
    return 0;
}
