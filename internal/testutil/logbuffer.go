package testutil

import (
	"bytes"
	"encoding/json"
	"sync"
)

// LogBuffer collects JSON log lines (a slog.JSONHandler's) written from any
// goroutine, for tests to inspect.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Lines returns the decoded log lines whose msg is msg.
func (b *LogBuffer) Lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
