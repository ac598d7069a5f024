package jail

import (
	"os"
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
