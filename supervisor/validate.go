package supervisor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

// requestFields are the fields of a request in API.md's order, which is the
// order they are checked in: an error names the first bad one.
var requestFields = []string{"id", "language", "code", "timeout_seconds", "memory_mib", "packages", "env", "network"}

var networkFields = []string{"mode", "domains"}

// decodeRequest decodes and validates a POST /v1/runs body against API.md. It
// refuses unknown fields and wrong types, and names the first bad field in words
// a model can act on. The request it returns has every default filled in.
func decodeRequest(body []byte) (api.Request, *apiError) {
	var req api.Request
	if err := checkUTF8(body); err != nil {
		return req, err
	}
	fields, err := decodeObject(body, "", requestFields)
	if err != nil {
		return req, err
	}
	// One pass in API.md's order, each field decoded then checked, so that the
	// error names the first bad field whatever is wrong with the later ones.
	for _, f := range requestFields {
		if raw, ok := fields[f]; ok {
			if err := decodeField(&req, f, raw); err != nil {
				return req, err
			}
		}
		if err := checkField(req, f); err != nil {
			return req, err
		}
	}
	return req.WithDefaults(), nil
}

// CheckRequest checks a request made in Go (brig run --local, which has no
// body to decode) against API.md's bounds, as decodeRequest checks a body's:
// the first bad field's error, or nil.
func CheckRequest(req api.Request) *api.Error {
	for _, f := range requestFields {
		if err := checkField(req, f); err != nil {
			return &err.body
		}
	}
	return nil
}

// decodeField decodes one member of the body into req, refusing a wrong type.
func decodeField(req *api.Request, f string, raw json.RawMessage) *apiError {
	if err := refuseNull("", f, raw); err != nil {
		return err
	}
	var err error
	switch f {
	case "id":
		if err = json.Unmarshal(raw, &req.ID); err == nil && req.ID == "" {
			return invalid("id", "is empty; give %d to %d of A-Z a-z 0-9 . _ : -, or leave it out to get a generated id", api.MinIDChars, api.MaxIDChars)
		}
	case "language":
		err = json.Unmarshal(raw, &req.Language)
	case "code":
		err = json.Unmarshal(raw, &req.Code)
	case "timeout_seconds":
		req.TimeoutSeconds, err = wholeNumber(raw)
	case "memory_mib":
		req.MemoryMiB, err = wholeNumber(raw)
	case "packages":
		var aerr *apiError
		req.Packages, aerr = decodeStrings("packages", raw, `a package with a version constraint, such as "numpy==1.26.4" or "lodash@4.17.21"`)
		return aerr
	case "env":
		return decodeEnv(req, raw)
	case "network":
		var aerr *apiError
		req.Network, aerr = decodeNetwork(raw)
		return aerr
	}
	if err != nil {
		return invalid(f, "%s", typeHint[f])
	}
	return nil
}

// wholeNumber decodes a JSON number whose value is a whole number, however it
// is written: 30, 30.0 or 3e1, as JSON Schema's "integer" (the OpenAPI
// document's type) admits, and as a client's float sends it. A string, a
// fraction or a number beyond int32 is an error.
func wholeNumber(raw json.RawMessage) (*int, error) {
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' {
		return nil, errors.New("not a number")
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	if i, err := n.Int64(); err == nil && i >= math.MinInt32 && i <= math.MaxInt32 {
		v := int(i)
		return &v, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 || !integralLiteral(n.String()) {
		return nil, fmt.Errorf("%s is not a whole number in range", n)
	}
	v := int(f)
	return &v, nil
}

// integralLiteral reports whether the JSON number literal s is a whole number
// as written, not only once rounded to a float64 (0.99999999999999999999,
// which rounds to 1): no digit but 0 is left after the point once the
// exponent has moved it.
func integralLiteral(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	shift := 0
	if hasExp {
		e, err := strconv.Atoi(exp)
		if err != nil || e < -1000 || e > 1000 {
			return false
		}
		shift = e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits, point := whole+frac, len(whole)+shift
	return point >= len(digits) || strings.Trim(digits[max(point, 0):], "0") == ""
}

// decodeEnv decodes env, refusing any value that is not a string (null too,
// which encoding/json would make "").
func decodeEnv(req *api.Request, raw json.RawMessage) *apiError {
	vars, dup, err := members(raw)
	if err != nil {
		return invalid("env", "%s", typeHint["env"])
	}
	if dup != "" {
		return invalid("env."+dup, "is given twice in env; give each variable once")
	}
	req.Env = make(map[string]string, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		v := vars[k]
		var s string
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) || json.Unmarshal(v, &s) != nil {
			return invalid("env."+k, "must be a string, such as {%q: \"1\"}: env's values are strings", k)
		}
		req.Env[k] = s
	}
	return nil
}

// typeHint says what a field must look like, for a value of the wrong type. Its
// bounds and words are api's, so that no message falls behind the contract.
var typeHint = map[string]string{
	"id":              fmt.Sprintf("must be a string of %d to %d characters from A-Z a-z 0-9 . _ : -, or left out to get a generated id", api.MinIDChars, api.MaxIDChars),
	"language":        "must be the string " + api.OneOf(api.Languages),
	"code":            fmt.Sprintf("must be a string: the program's source, %d to %d characters", api.MinCodeChars, api.MaxCodeChars),
	"timeout_seconds": fmt.Sprintf("must be a whole number of seconds from %d to %d (leave it out for %d)", api.MinTimeoutSeconds, api.MaxTimeoutSeconds, api.DefaultTimeoutSeconds),
	"memory_mib":      fmt.Sprintf("must be a whole number of MiB from %d to %d (leave it out for %d)", api.MinMemoryMiB, api.MaxMemoryMiB, api.DefaultMemoryMiB),
	"packages":        `must be an array of strings, each a package with a version constraint, such as ["numpy==1.26.4"] or ["lodash@4.17.21"]`,
	"env":             `must be an object whose values are strings, such as {"DEBUG": "1"}`,
	"network":         fmt.Sprintf(`must be an object such as {"mode": %q} or {"mode": %q, "domains": ["example.com"]}`, api.NetworkNone, api.NetworkDomains),
	"network.mode":    "must be one of the strings " + api.OneOf(api.NetworkModes),
	"network.domains": `must be an array of host names, such as ["example.com"]`,
}

// decodeObject decodes body as one JSON object whose keys are all in known, and
// returns its members.
func decodeObject(body []byte, prefix string, known []string) (map[string]json.RawMessage, *apiError) {
	what := "the body"
	if prefix != "" {
		what = prefix
	}
	fields, dup, err := members(body)
	if err == errTrailing {
		return nil, invalid(prefix, "%s must be one JSON object with nothing after it", what)
	}
	if err != nil {
		if prefix != "" {
			return nil, invalid(prefix, "%s", typeHint[prefix])
		}
		msg := "must be one JSON object"
		var se *json.SyntaxError
		if errors.As(err, &se) {
			msg += fmt.Sprintf(" (invalid JSON at byte %d: %v)", se.Offset, se)
		} else if errors.Is(err, io.ErrUnexpectedEOF) && len(bytes.TrimSpace(body)) > 0 {
			msg += fmt.Sprintf(" (the JSON ends at byte %d before the object closes: was the body cut short?)", len(body))
		}
		return nil, invalid("", "%s %s, such as {\"language\": %q, \"code\": \"print(1)\"}", what, msg, api.Python)
	}
	if dup != "" {
		return nil, invalid(join(prefix, dup), "is given twice in %s; give each field once", what)
	}
	var unknown []string
	for k := range fields {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, invalid(join(prefix, unknown[0]), "is not a field of %s; the fields are %s", what, strings.Join(known, ", "))
	}
	return fields, nil
}

// errTrailing is members' error for an object followed by more than space.
var errTrailing = errors.New("data after the object")

// members decodes b as one JSON object and returns its members, or the first
// name it gives twice. encoding/json keeps the last of a name given twice,
// where another parser (a harness's validator, a proxy's) may keep the first:
// such a body is refused, so that brig never runs other code, or with another
// environment, than the request shows to every reader of it.
func members(b []byte) (fields map[string]json.RawMessage, dup string, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil {
		return nil, "", err
	} else if t != json.Delim('{') {
		return nil, "", errors.New("not an object")
	}
	fields = map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		name := t.(string) // Token gives an object's names as strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "", err
		}
		if _, ok := fields[name]; ok && dup == "" {
			dup = name
		}
		fields[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errTrailing
	}
	return fields, dup, nil
}

func decodeNetwork(raw json.RawMessage) (*api.Network, *apiError) {
	fields, err := decodeObject(raw, "network", networkFields)
	if err != nil {
		return nil, err
	}
	for _, k := range networkFields {
		if err := refuseNull("network", k, fields[k]); err != nil {
			return nil, err
		}
	}
	n := &api.Network{}
	if v, ok := fields["mode"]; ok && (json.Unmarshal(v, &n.Mode) != nil || n.Mode == "") {
		return nil, invalid("network.mode", "%s", typeHint["network.mode"])
	}
	if v, ok := fields["domains"]; ok {
		var aerr *apiError
		if n.Domains, aerr = decodeStrings("network.domains", v, `a host name such as "example.com"`); aerr != nil {
			return nil, aerr
		}
	}
	return n, nil
}

// decodeStrings decodes field, an array of strings, element by element, so
// that a wrong type (null too, which encoding/json would make "") is named by
// its index: field[i].
func decodeStrings(field string, raw json.RawMessage, elemHint string) ([]string, *apiError) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid(field, "%s", typeHint[field])
	}
	out := make([]string, len(items))
	for i, it := range items {
		if bytes.Equal(bytes.TrimSpace(it), []byte("null")) || json.Unmarshal(it, &out[i]) != nil {
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "must be a string: %s", elemHint)
		}
	}
	return out, nil
}

// refuseNull refuses a member whose value is null: null is not a value of any
// field; leaving a field out gives its default.
func refuseNull(prefix, k string, raw json.RawMessage) *apiError {
	if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	if prefix == "" && (k == "language" || k == "code") {
		return invalid(k, "is null; it is required and %s", typeHint[k])
	}
	hint := typeHint[join(prefix, k)]
	if strings.Contains(hint, "leave it out") || strings.Contains(hint, "left out") {
		return invalid(join(prefix, k), "is null; it %s", hint) // the hint says what leaving it out gives
	}
	return invalid(join(prefix, k), "is null; it %s, or leave it out for its default", hint)
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// checkField checks the value of field f of a decoded request against its bound.
// Fields before f in API.md's order have been checked.
func checkField(req api.Request, f string) *apiError {
	switch f {
	case "id":
		if req.ID != "" {
			return validateID(req.ID)
		}
	case "language":
		if req.Language == "" {
			return invalid("language", "is required: %s", api.OneOf(api.Languages))
		}
		if _, err := api.ParseLanguage(req.Language); err != nil {
			return invalid("language", "%q is not a language brig runs: use %s", req.Language, api.OneOf(api.Languages))
		}
	case "code":
		switch n := utf8.RuneCountInString(req.Code); {
		case n < api.MinCodeChars:
			return invalid("code", "is required: the program's source, %d to %d characters", api.MinCodeChars, api.MaxCodeChars)
		case n > api.MaxCodeChars:
			return invalid("code", "has %d characters; at most %d are allowed (characters are Unicode code points): shorten the program", n, api.MaxCodeChars)
		}
		// Python 3.11 stops reading a source file at its first NUL and runs
		// what came before it, exit 0: other code than was sent (the
		// contract probe of 2026-12-06), as a non-UTF-8 body would be. Node
		// reads one in a string literal as the character.
		if i := strings.IndexByte(req.Code, 0); i >= 0 && req.Language == string(api.Python) {
			return invalid("code", "holds a NUL character (U+0000) at character %d, where Python stops reading the program and runs what came before it: write it as an escape in a string (\\0 or \\x00), or leave it out", utf8.RuneCountInString(req.Code[:i])+1)
		}
	case "timeout_seconds":
		if t := req.TimeoutSeconds; t != nil && (*t < api.MinTimeoutSeconds || *t > api.MaxTimeoutSeconds) {
			return invalid("timeout_seconds", "is %d; give a whole number of seconds from %d to %d (leave it out for %d)", *t, api.MinTimeoutSeconds, api.MaxTimeoutSeconds, api.DefaultTimeoutSeconds)
		}
	case "memory_mib":
		if m := req.MemoryMiB; m != nil && (*m < api.MinMemoryMiB || *m > api.MaxMemoryMiB) {
			return invalid("memory_mib", "is %d; give a whole number of MiB from %d to %d (leave it out for %d)", *m, api.MinMemoryMiB, api.MaxMemoryMiB, api.DefaultMemoryMiB)
		}
	case "packages":
		if len(req.Packages) > api.MaxPackages {
			return invalid("packages", "has %d entries; at most %d packages are allowed in one run", len(req.Packages), api.MaxPackages)
		}
		if _, err := packages.ParseRequests(req.Language, req.Packages); err != nil {
			var re *packages.RequestError
			if errors.As(err, &re) && re.Index >= 0 {
				return invalid(fmt.Sprintf("packages[%d]", re.Index), "%s", re.Message)
			}
			return invalid("packages", "%v", err)
		}
	case "env":
		if err := jail.ValidateEnv(req.Env); err != nil {
			var ee *jail.EnvError
			if errors.As(err, &ee) && ee.Name != "" {
				return invalid("env."+ee.Name, "%s", ee.Message)
			}
			return invalid("env", "%v", err)
		}
	case "network":
		if n := req.Network; n != nil {
			return validateNetwork(*n)
		}
	}
	return nil
}

// checkUTF8 refuses a body that is not UTF-8, or whose strings escape half a
// surrogate pair: encoding/json would turn either into U+FFFD, and the run
// would get code or an environment other than the one sent. The error names the
// member that holds the bad byte, as any other field's error does.
func checkUTF8(body []byte) *apiError {
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		return invalid("", "the body starts with a byte-order mark (EF BB BF), which JSON does not allow; send the JSON without it")
	}
	// at refuses the body for what is at byte i, naming the member holding it.
	at := func(i int, format string, args ...any) *apiError {
		field, subject := fieldAt(body, i), "holds"
		if field == "" {
			subject = "the body holds"
		}
		return invalid(field, subject+" "+format, args...)
	}
	if i := api.InvalidUTF8At(body); i >= 0 {
		return at(i, "a byte that is not UTF-8 (byte %d of the body is 0x%02x); send JSON encoded in UTF-8", i, body[i])
	}
	surrogate := func(hi rune, i int) *apiError {
		return at(i, "half a surrogate pair (\\u%04x at byte %d of the body); escape a character beyond U+FFFF as a high and a low surrogate, or send it as UTF-8", hi, i)
	}
	// Escapes occur only inside strings, and an escaped backslash is
	// skipped whole, so this reads every \u escape of a valid body.
	for i := 0; i+1 < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if body[i+1] != 'u' {
			i++
			continue
		}
		hi, ok := hex4(body, i+2)
		switch {
		case !ok:
		case hi >= 0xdc00 && hi <= 0xdfff:
			return surrogate(hi, i)
		case hi >= 0xd800 && hi <= 0xdbff:
			lo, ok := rune(0), i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u'
			if ok {
				lo, ok = hex4(body, i+8)
			}
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return surrogate(hi, i)
			}
			i += 6
		}
		i += 5
	}
	return nil
}

// fieldAt names the member of a JSON body whose value holds byte off, in the
// API's error field's form ("code", "env.HOME", "packages[1]",
// "network.domains[0]"); a byte in a member's name names the object holding
// it. It is "" when the body is not an object, the byte is not in a field of
// the request, or the body can't be read as far as off. encoding/json's
// tokens take invalid UTF-8 as U+FFFD, so this reads what checkUTF8 refuses.
func fieldAt(body []byte, off int) string {
	type level struct {
		object  bool
		key     string // in an object: the member being read
		index   int    // in an array: the element being read
		wantKey bool
	}
	var stack []level
	path := func(withTop bool) string {
		n := len(stack)
		if !withTop {
			n--
		}
		if n <= 0 || !stack[0].object || !slices.Contains(requestFields, stack[0].key) {
			return "" // the body's, or an unknown member's, refused by its name once read
		}
		var b strings.Builder
		for _, l := range stack[:n] {
			switch {
			case l.object && b.Len() > 0:
				b.WriteString("." + l.key)
			case l.object:
				b.WriteString(l.key)
			default:
				fmt.Fprintf(&b, "[%d]", l.index)
			}
		}
		return b.String()
	}
	// valueDone moves the enclosing level past the value just read.
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := int(dec.InputOffset())
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				stack = append(stack, level{object: d == '{', wantKey: d == '{'})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].wantKey {
			if off < end {
				return path(false)
			}
			stack[top].key, _ = tok.(string)
			stack[top].wantKey = false
			continue
		}
		if off < end {
			return path(true)
		}
		valueDone()
	}
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func validateID(id string) *apiError {
	if id == "." || id == ".." {
		return invalid("id", "is %q, a path segment that HTTP clients and servers remove from /v1/runs/{id}, so the run could never be read or stopped; use another id, or leave it out to get a generated id", id)
	}
	if len(id) > api.MaxIDChars {
		return invalid("id", "has %d characters; give %d to %d of A-Z a-z 0-9 . _ : -, or leave it out to get a generated id", len(id), api.MinIDChars, api.MaxIDChars)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)) {
			return invalid("id", "contains %q; use only A-Z a-z 0-9 . _ : - (%d to %d characters), or leave it out to get a generated id", c, api.MinIDChars, api.MaxIDChars)
		}
	}
	return nil
}

func validateNetwork(n api.Network) *apiError {
	if n.Mode == "" { // left out, so none
		n.Mode = api.NetworkNone
	}
	mode, err := api.ParseNetworkMode(n.Mode)
	if err != nil {
		return invalid("network.mode", "%q is not a network mode: use %s", n.Mode, api.OneOf(api.NetworkModes))
	}
	if mode != api.NetworkDomains {
		if len(n.Domains) > 0 {
			return invalid("network.domains", "apply only with mode %q: drop them, or set network.mode to %q", api.NetworkDomains, api.NetworkDomains)
		}
		return nil
	}
	if len(n.Domains) == 0 {
		return invalid("network.domains", "is missing or empty; mode %q needs %d to %d host names, such as [\"example.com\"] (each admits its subdomains)", api.NetworkDomains, api.MinDomains, api.MaxDomains)
	}
	if len(n.Domains) < api.MinDomains || len(n.Domains) > api.MaxDomains {
		return invalid("network.domains", "has %d entries; mode %q needs %d to %d host names, such as [\"example.com\"] (each admits its subdomains)", len(n.Domains), api.NetworkDomains, api.MinDomains, api.MaxDomains)
	}
	for i, d := range n.Domains {
		if _, err := egress.ParseDomain(d); err != nil {
			return invalid(fmt.Sprintf("network.domains[%d]", i), "%v", err)
		}
	}
	return nil
}

// requestKey identifies what a request asks for, apart from its id: two requests
// with one id and the same key are the same run (a retry), with different keys a
// conflict. req has its defaults filled, so that leaving a field out and giving
// its default are the same request. The domains and the packages are sets: a
// harness that builds them from a set of its own sends them in another order
// from one process to the next, and its retry is still the same run; a domain
// counts as ParseDomain normalises it (case, trailing dot), once.
func requestKey(req api.Request) string {
	req.ID = ""
	req.Packages = slices.Sorted(slices.Values(req.Packages))
	if n := req.Network; n != nil && len(n.Domains) > 0 {
		domains := make([]string, 0, len(n.Domains))
		for _, d := range n.Domains {
			if norm, err := egress.ParseDomain(d); err == nil {
				d = norm
			}
			domains = append(domains, d)
		}
		slices.Sort(domains)
		req.Network = &api.Network{Mode: n.Mode, Domains: slices.Compact(domains)}
	}
	return keyOf(req)
}

// legacyRequestKey is requestKey before it took the domains and the packages
// as sets (2026-12-05): the key of the runs journaled before, which a retry
// of the same request, sent in the same order, still matches.
func legacyRequestKey(req api.Request) string {
	req.ID = ""
	return keyOf(req)
}

func keyOf(req api.Request) string {
	b, _ := json.Marshal(req) // a Request always marshals; map keys are sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
