/* wasi-libc (Debian's 2022 snapshot) has no threads. quickjs.c uses a
   mutex around class ids and Atomics.wait/notify (CONFIG_ATOMICS). A keep
   instance runs one thread, so the mutex does nothing, and a wait, which
   QuickJS refuses unless the runtime can block (keep never lets it),
   traps if it were ever reached. */
#ifndef KEEP_WASI_PTHREAD_H
#define KEEP_WASI_PTHREAD_H
#include <time.h>
typedef int pthread_mutex_t;
typedef int pthread_cond_t;
typedef int pthread_condattr_t;
typedef int clockid_t_unused;
#define PTHREAD_MUTEX_INITIALIZER 0
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_cond_init(pthread_cond_t *c, const void *a) { (void)c; (void)a; return 0; }
static inline int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_signal(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) { (void)c; (void)m; __builtin_trap(); }
static inline int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) { (void)c; (void)m; (void)t; __builtin_trap(); }
static inline int pthread_condattr_init(pthread_condattr_t *a) { (void)a; return 0; }
static inline int pthread_condattr_setclock(pthread_condattr_t *a, int c) { (void)a; (void)c; return 0; }
static inline int pthread_condattr_destroy(pthread_condattr_t *a) { (void)a; return 0; }
static inline int pthread_cond_init_attr_unused(void) { return 0; }
#endif
