package jail

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOutputPipeCapacity: a run's stdout pipe holds 1 MiB, so that a Node
// program's output is whole at process.exit() (TestOutputCapsInRun), and its
// stderr pipe 128 KiB, less of its maker's fs.pipe-user-pages-soft.
func TestOutputPipeCapacity(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		t.Skipf("this host does not say its pipe-max-size: %v", err)
	}
	if max, _ := strconv.Atoi(strings.TrimSpace(string(b))); max < stdoutPipeBytes {
		t.Skipf("this host's fs.pipe-max-size is %d, below %d", max, stdoutPipeBytes)
	}
	for _, want := range []int{stdoutPipeBytes, stderrPipeBytes} {
		r, w, err := outputPipe(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
		r.Close()
		w.Close()
		if err != nil || got != want {
			t.Errorf("an output pipe of %d bytes holds %d (%v)", want, got, err)
		}
	}
}
