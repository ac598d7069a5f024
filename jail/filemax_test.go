package jail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFileMax: the open-file check always passes, names the limit it
// read, and warns with what to do exactly when the limit is within a run's
// reach.
func TestCheckFileMax(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		t.Skipf("no fs.file-max here: %v", err)
	}
	n, err := FileMax()
	if err != nil {
		t.Fatal(err)
	}
	c := CheckFileMax()
	if !c.OK || !strings.Contains(c.Detail, "fs.file-max = "+strings.TrimSpace(string(b))) {
		t.Fatalf("got %+v, want a pass naming fs.file-max = %s", c, strings.TrimSpace(string(b)))
	}
	if advises := c.Warn && strings.Contains(c.Hint, "sysctl -w fs.file-max="); advises != (n < FileMaxWanted) {
		t.Errorf("limit %d: got %+v, want a warning with the remedy exactly when it is below %d", n, c, uint64(FileMaxWanted))
	}
}

// TestCheckHugePages: a host pool of huge pages, which runs could take
// outside their memory limits, is warned of with the remedy; none passes
// quietly.
func TestCheckHugePages(t *testing.T) {
	for _, tc := range []struct {
		nr, overcommit string
		warn           bool
	}{{"0\n", "0\n", false}, {"16\n", "0\n", true}, {"0\n", "8\n", true}} {
		vm := t.TempDir()
		os.WriteFile(filepath.Join(vm, "nr_hugepages"), []byte(tc.nr), 0o644)
		os.WriteFile(filepath.Join(vm, "nr_overcommit_hugepages"), []byte(tc.overcommit), 0o644)
		c := checkHugePages(vm)
		if !c.OK || c.Warn != tc.warn || (tc.warn && !strings.Contains(c.Hint, "vm.nr_hugepages")) {
			t.Errorf("nr_hugepages %q, overcommit %q: got %+v, want a pass that warns %v", tc.nr, tc.overcommit, c, tc.warn)
		}
	}
}
