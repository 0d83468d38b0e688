#!/bin/sh
# Builds quickjs.wasm, the QuickJS interpreter keep runs scripts in without
# a process hop (issue 43), from the QuickJS sources vendored in
# third_party/quickjs and keep_wasm.c beside this script.
#
# Toolchain: Debian 12's WASI one, and nothing downloaded:
#   apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32
# (clang 14.0.6, wasi-libc 0.0~git20220510.9886d3d-2). The same toolchain
# gives the same bytes: TestQuickJSWasmIsBuiltFromTheSources rebuilds it
# and compares where clang is installed.
#
# usage: build.sh [OUT]   (OUT defaults to ../quickjs.wasm)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../../../third_party/quickjs" && pwd)
out=${1:-$here/../quickjs.wasm}
cc=${CC:-clang}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# -include malloc.h: quickjs.c calls malloc_usable_size, which wasi-libc
# declares there. compat/ holds the two headers wasi-libc lacks.
flags="--target=wasm32-unknown-wasi -O2 -fno-ident -ffile-prefix-map=$src=. -ffile-prefix-map=$here=. \
 -D_GNU_SOURCE -DCONFIG_VERSION=\"$(cat "$src/VERSION")\" -include malloc.h -I$here/compat -I$src \
 -Wno-implicit-function-declaration -Wno-unused-but-set-variable"
for f in quickjs libregexp libunicode cutils dtoa; do
	$cc $flags -c "$src/$f.c" -o "$tmp/$f.o"
done
$cc $flags -c "$here/keep_wasm.c" -o "$tmp/keep_wasm.o"
# A reactor: no main, keep calls the exports. 1 MiB of C stack (QuickJS's
# own recursion check, set by keep_init, stops a script well before it).
$cc --target=wasm32-unknown-wasi -mexec-model=reactor -O2 -Wl,-z,stack-size=1048576 -Wl,--strip-all \
	"$tmp"/*.o -o "$tmp/quickjs.wasm"
mv "$tmp/quickjs.wasm" "$out"
