package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/text"
)

// apiError is an error the API reports to its caller: a class (api.Error.Code)
// that statusOf maps to the HTTP status, and for 429 how long to wait.
type apiError struct {
	body       api.Error
	retryAfter int // seconds; for queue_full
	// runID is the id the service made for a run it then refused (its
	// journal's write failed), for the request's log line, which the
	// refusal's own line names it by.
	runID string
}

func (e *apiError) Error() string { return e.body.Error() }

// invalid refuses a request for its field. Both the field (an env name is
// part of it) and the message (which quotes the bad value) are clipped: a
// value of megabytes would otherwise come back whole, past what clients read
// of an error's body, and the field be lost with it.
func invalid(field, format string, args ...any) *apiError {
	return &apiError{body: api.Error{Code: api.ErrorInvalidRequest, Field: text.ClipMiddle(field, maxFieldBytes), Message: text.ClipMiddle(sprintf(format, args...), maxMessageBytes)}}
}

// The bounds of an error's field and message: far above any the service
// writes of its own, but for the values they quote.
const (
	maxFieldBytes   = 256
	maxMessageBytes = 4096
)

func newError(code, format string, args ...any) *apiError {
	return &apiError{body: api.Error{Code: code, Message: text.ClipMiddle(sprintf(format, args...), maxMessageBytes)}}
}

// statusOf is the one place an error class becomes an HTTP status.
func statusOf(code string) int {
	switch code {
	case api.ErrorInvalidRequest:
		return http.StatusBadRequest
	case api.ErrorForbidden:
		return http.StatusForbidden
	case api.ErrorNotFound:
		return http.StatusNotFound
	case api.ErrorConflict:
		return http.StatusConflict
	case api.ErrorTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.ErrorQueueFull:
		return http.StatusTooManyRequests
	case api.ErrorMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case api.ErrorUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// writeError writes err in the API's one error shape. An error that is not an
// *apiError is a defect: 500, with the error's text.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	var lost *journalLost
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &lost):
		// No Retry-After: only a restart mends it.
		ae = newError(api.ErrorUnavailable, "%s; send new runs to another brig", lostAnswer)
	default:
		ae = newError(api.ErrorInternal, "internal error: %v", err)
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	writeJSON(w, statusOf(ae.body.Code), api.ErrorBody{Error: ae.body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // api.Marshal says why
	enc.Encode(v)
}

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}
