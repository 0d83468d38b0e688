package wasmjs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestQuickJSWasmIsBuiltFromTheSources rebuilds quickjs.wasm with
// build/build.sh and compares it with the committed one, byte for byte: the
// module keep runs is the one its sources make. It needs Debian's WASI
// toolchain (build.sh names the packages) and is skipped without it.
func TestQuickJSWasmIsBuiltFromTheSources(t *testing.T) {
	if _, err := os.Stat("/usr/lib/wasm32-wasi/libc.a"); err != nil {
		t.Skip("no WASI toolchain here (apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32)")
	}
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("no clang here (apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32)")
	}
	out := filepath.Join(t.TempDir(), "quickjs.wasm")
	cmd := exec.Command("sh", "build/build.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	built, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(built, quickjsWasm) {
		t.Fatalf("quickjs.wasm (%d bytes) is not what build/build.sh makes from the sources (%d bytes): run build/build.sh and commit its output", len(quickjsWasm), len(built))
	}
}
