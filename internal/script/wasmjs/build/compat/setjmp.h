/* wasi-libc (Debian's 2022 snapshot) has no setjmp.h. dtoa.c includes it
   but never uses it: this empty header lets it compile unchanged. */
#ifndef KEEP_WASI_SETJMP_H
#define KEEP_WASI_SETJMP_H
#endif
