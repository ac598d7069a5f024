// Package text shortens strings that brig quotes back to a client or a log:
// a value a request sent, an installer's output. Both cuts fall at the
// starts of characters, so that what is left is as valid UTF-8 as what was
// given.
package text

import (
	"fmt"
	"unicode/utf8"
)

// Clip cuts s to at most n bytes and an ellipsis.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ClipMiddle shortens s to about n bytes by leaving out its middle, where a
// quoted value lies; its start (what is wrong) and end (what to do) stay.
func ClipMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// The marker takes at most 32 bytes (a count of up to 10 digits).
	i, j := max(n*2/3-32, 0), len(s)-n/4
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	for j < len(s) && !utf8.RuneStart(s[j]) {
		j++
	}
	return fmt.Sprintf("%s…(%d bytes left out)…%s", s[:i], j-i, s[j:])
}
