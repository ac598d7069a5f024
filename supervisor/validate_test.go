package supervisor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
)

// validBody builds a request body from a minimal valid python request and extra
// members, each a `"name": value` JSON fragment; a fragment for language or code
// replaces the minimal one.
func validBody(members ...string) string {
	lang, code := `"language": "python"`, `"code": "print(1)"`
	var rest []string
	for _, m := range members {
		switch {
		case strings.HasPrefix(m, `"language"`):
			lang = m
		case strings.HasPrefix(m, `"code"`):
			code = m
		default:
			rest = append(rest, m)
		}
	}
	parts := append([]string{lang, code}, rest...)
	return "{" + strings.Join(parts, ", ") + "}"
}

// jsonQuote is s as a JSON string literal.
func jsonQuote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// jsonStrings is a JSON array of n strings made by f.
func jsonStrings(n int, f func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = jsonQuote(f(i))
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// jsonEnvObject is a JSON object of n valid environment variables.
// jsonBigEnv is an env object of n variables whose values are size bytes each.
func jsonBigEnv(n, size int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`"BIG_%d": %q`, i, strings.Repeat("x", size))
	}
	return "{" + strings.Join(items, ", ") + "}"
}

func jsonEnvObject(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`"VAR_%d": "v%d"`, i, i)
	}
	return "{" + strings.Join(items, ", ") + "}"
}

// goInternalTexts are fragments of Go's own error texts, which a model can't act on.
var goInternalTexts = []string{"json:", "unmarshal", "Go value", "map[string]", "RawMessage", "*int", "[]string", "<nil>", "%!"}

func TestDecodeRequest(t *testing.T) {
	idChars := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
	for _, tc := range []struct {
		name string
		body string
		// field is the error's field; "" with valid set means the request is
		// accepted.
		field string
		valid bool
		// contains is text the error's message must hold.
		contains []string
		// check looks at an accepted request beyond the defaults.
		check func(t *testing.T, req api.Request)
	}{
		// The minimal request, and the defaults it gets.
		{name: "minimal python", body: validBody(), valid: true},
		{name: "minimal javascript", body: validBody(`"language": "javascript"`, `"code": "console.log(1)"`), valid: true},

		// id
		{name: "id 1 char", body: validBody(`"id": "a"`), valid: true, check: wantDecodedID("a")},
		{name: "id 128 chars", body: validBody(`"id": ` + jsonQuote(strings.Repeat("x", 128))), valid: true},
		{name: "id 129 chars", body: validBody(`"id": ` + jsonQuote(strings.Repeat("x", 129))), field: "id"},
		{name: "id empty", body: validBody(`"id": ""`), field: "id"},
		{name: "id every allowed char", body: validBody(`"id": ` + jsonQuote(idChars)), valid: true, check: wantDecodedID(idChars)},
		{name: "id space", body: validBody(`"id": "a b"`), field: "id"},
		{name: "id slash", body: validBody(`"id": "a/b"`), field: "id"},
		{name: "id non-ASCII", body: validBody(`"id": "é"`), field: "id"},
		{name: "id NUL", body: validBody(`"id": "a\u0000b"`), field: "id"},
		{name: "id number", body: validBody(`"id": 5`), field: "id"},
		{name: "id null", body: validBody(`"id": null`), field: "id", contains: []string{"is null; it must be a string of 1 to 128 characters from A-Z a-z 0-9 . _ : -, or left out to get a generated id"}},

		// language
		{name: "language missing", body: `{"code": "print(1)"}`, field: "language"},
		{name: "language null", body: validBody(`"language": null`), field: "language"},
		{name: "language ruby", body: validBody(`"language": "ruby"`), field: "language", contains: []string{"python", "javascript"}},
		{name: "language number", body: validBody(`"language": 123`), field: "language"},
		{name: "language wrong case", body: validBody(`"language": "Python"`), field: "language"},

		// code, in code points
		{name: "code empty", body: validBody(`"code": ""`), field: "code"},
		{name: "code missing", body: `{"language": "python"}`, field: "code"},
		{name: "code null", body: validBody(`"code": null`), field: "code"},
		{name: "code number", body: validBody(`"code": 1`), field: "code"},
		{name: "code 1 char", body: validBody(`"code": "1"`), valid: true},
		// Python 3.11 runs what comes before a NUL, exit 0.
		{name: "code NUL", body: validBody(`"code": "print(1)\u0000print(2)"`), field: "code", contains: []string{"NUL character (U+0000) at character 9", `\x00`}},
		{name: "code NUL after a two-byte character", body: validBody(`"code": "é\u0000"`), field: "code", contains: []string{"at character 2"}},
		{name: "code escaped NUL", body: validBody(`"code": "print('\\0')"`), valid: true},
		// Node reads a NUL in a string literal as the character.
		{name: "code NUL in JavaScript", body: `{"language": "javascript", "code": "console.log(\"a\u0000b\".length)"}`, valid: true},
		{name: "code 100000 chars", body: validBody(`"code": ` + jsonQuote(strings.Repeat("x", api.MaxCodeChars))), valid: true},
		{name: "code 100001 chars", body: validBody(`"code": ` + jsonQuote(strings.Repeat("x", api.MaxCodeChars+1))), field: "code"},
		{name: "code 100000 two-byte code points", body: validBody(`"code": ` + jsonQuote(strings.Repeat("é", api.MaxCodeChars))), valid: true},
		{name: "code 100001 two-byte code points", body: validBody(`"code": ` + jsonQuote(strings.Repeat("é", api.MaxCodeChars+1))), field: "code"},

		// timeout_seconds
		{name: "timeout 1", body: validBody(`"timeout_seconds": 1`), valid: true, check: wantDecodedTimeout(1)},
		{name: "timeout 300", body: validBody(`"timeout_seconds": 300`), valid: true, check: wantDecodedTimeout(300)},
		{name: "timeout 0", body: validBody(`"timeout_seconds": 0`), field: "timeout_seconds"},
		{name: "timeout 301", body: validBody(`"timeout_seconds": 301`), field: "timeout_seconds"},
		{name: "timeout -1", body: validBody(`"timeout_seconds": -1`), field: "timeout_seconds"},
		{name: "timeout 1.5", body: validBody(`"timeout_seconds": 1.5`), field: "timeout_seconds"},
		{name: "timeout string", body: validBody(`"timeout_seconds": "30"`), field: "timeout_seconds"},
		// JSON Schema's integer: a number whose value is whole, as a float sends it.
		{name: "timeout 1e2", body: validBody(`"timeout_seconds": 1e2`), valid: true, check: wantDecodedTimeout(100)},
		{name: "timeout 2.0", body: validBody(`"timeout_seconds": 2.0`), valid: true, check: wantDecodedTimeout(2)},
		{name: "timeout 3e2", body: validBody(`"timeout_seconds": 3e2`), valid: true, check: wantDecodedTimeout(300)},
		{name: "timeout 1e3", body: validBody(`"timeout_seconds": 1e3`), field: "timeout_seconds"},
		{name: "timeout 2.5e0", body: validBody(`"timeout_seconds": 2.5e0`), field: "timeout_seconds"},
		{name: "timeout 1e400", body: validBody(`"timeout_seconds": 1e400`), field: "timeout_seconds"},
		// Fractions a float64 rounds to a whole number (the limits audit).
		{name: "timeout 0.99999999999999999999", body: validBody(`"timeout_seconds": 0.99999999999999999999`), field: "timeout_seconds"},
		{name: "timeout 300.0000000000000001", body: validBody(`"timeout_seconds": 300.0000000000000001`), field: "timeout_seconds"},
		{name: "memory 127.9999999999999999", body: validBody(`"memory_mib": 127.9999999999999999`), field: "memory_mib"},
		{name: "timeout 1e-400", body: validBody(`"timeout_seconds": 1e-400`), field: "timeout_seconds"},
		{name: "timeout 0.05e2", body: validBody(`"timeout_seconds": 0.05e2`), valid: true, check: wantDecodedTimeout(5)},
		{name: "timeout 5000e-3", body: validBody(`"timeout_seconds": 5000e-3`), valid: true, check: wantDecodedTimeout(5)},
		{name: "timeout 5001e-3", body: validBody(`"timeout_seconds": 5001e-3`), field: "timeout_seconds"},
		{name: "timeout 30.000", body: validBody(`"timeout_seconds": 30.000`), valid: true, check: wantDecodedTimeout(30)},
		{name: "timeout -0.0", body: validBody(`"timeout_seconds": -0.0`), field: "timeout_seconds"},
		{name: "memory 512.0", body: validBody(`"memory_mib": 512.0`), valid: true},
		{name: "memory 512.5", body: validBody(`"memory_mib": 512.5`), field: "memory_mib"},
		{name: "timeout huge", body: validBody(`"timeout_seconds": 99999999999999999999999`), field: "timeout_seconds"},
		{name: "timeout null", body: validBody(`"timeout_seconds": null`), field: "timeout_seconds", contains: []string{"from 1 to 300 (leave it out for 30)"}},

		// memory_mib
		{name: "memory 128", body: validBody(`"memory_mib": 128`), valid: true, check: wantDecodedMemory(128)},
		{name: "memory 2048", body: validBody(`"memory_mib": 2048`), valid: true, check: wantDecodedMemory(2048)},
		{name: "memory 127", body: validBody(`"memory_mib": 127`), field: "memory_mib"},
		{name: "memory 2049", body: validBody(`"memory_mib": 2049`), field: "memory_mib"},
		{name: "memory string", body: validBody(`"memory_mib": "512"`), field: "memory_mib"},

		// packages
		{name: "packages empty", body: validBody(`"packages": []`), valid: true},
		{name: "packages 50", body: validBody(`"packages": ` + jsonStrings(api.MaxPackages, func(i int) string { return fmt.Sprintf("pkg%d==1.0", i) })), valid: true,
			check: func(t *testing.T, req api.Request) {
				if len(req.Packages) != api.MaxPackages {
					t.Errorf("got %d packages, want %d", len(req.Packages), api.MaxPackages)
				}
			}},
		{name: "packages 51", body: validBody(`"packages": ` + jsonStrings(api.MaxPackages+1, func(i int) string { return fmt.Sprintf("pkg%d==1.0", i) })), field: "packages"},
		{name: "packages bad at index 3", body: validBody(`"packages": ["a==1", "b>=2,<3", "c~=2.31", "requests", "d==1"]`), field: "packages[3]", contains: []string{"pin it as"}},
		{name: "packages URL", body: validBody(`"packages": ["https://example.com/x.whl"]`), field: "packages[0]"},
		{name: "packages option", body: validBody(`"packages": ["--index-url=x"]`), field: "packages[0]"},
		{name: "packages javascript range", body: validBody(`"language": "javascript"`, `"packages": ["lodash@^4.17.0", "@types/node@20"]`), valid: true},
		{name: "packages javascript without constraint", body: validBody(`"language": "javascript"`, `"packages": ["lodash"]`), field: "packages[0]"},
		{name: "packages python syntax for javascript", body: validBody(`"language": "javascript"`, `"packages": ["lodash==4.17.21"]`), field: "packages[0]"},
		{name: "packages not an array", body: validBody(`"packages": "numpy==1.26.4"`), field: "packages"},
		{name: "packages number entry", body: validBody(`"packages": [1]`), field: "packages[0]"},

		// env
		{name: "env empty", body: validBody(`"env": {}`), valid: true},
		{name: "env 50", body: validBody(`"env": ` + jsonEnvObject(api.MaxEnvEntries)), valid: true,
			check: func(t *testing.T, req api.Request) {
				if len(req.Env) != api.MaxEnvEntries || req.Env["VAR_7"] != "v7" {
					t.Errorf("got env %v, want %d entries with VAR_7=v7", req.Env, api.MaxEnvEntries)
				}
			}},
		{name: "env 51", body: validBody(`"env": ` + jsonEnvObject(api.MaxEnvEntries+1)), field: "env"},
		{name: "env name starts with digit", body: validBody(`"env": {"1X": "v"}`), field: "env.1X"},
		{name: "env name with dash", body: validBody(`"env": {"A-B": "v"}`), field: "env.A-B"},
		{name: "env underscore name", body: validBody(`"env": {"_a1": "v"}`), valid: true},
		{name: "env PATH reserved", body: validBody(`"env": {"PATH": "/bin"}`), field: "env.PATH", contains: []string{"reserved"}},
		{name: "packages element not a string", body: validBody(`"packages": ["numpy==1.26.4", 5]`), field: "packages[1]", contains: []string{"must be a string"}},
		{name: "packages element null", body: validBody(`"packages": [null]`), field: "packages[0]"},
		{name: "env HTTP_PROXY reserved", body: validBody(`"env": {"HTTP_PROXY": "http://x"}`), field: "env.HTTP_PROXY", contains: []string{"reserved"}},
		// Python's urllib reads proxy variables in any case.
		{name: "env Http_Proxy reserved", body: validBody(`"env": {"Http_Proxy": "http://x"}`), field: "env.Http_Proxy", contains: []string{"reserved"}},
		{name: "env No_Proxy reserved", body: validBody(`"env": {"No_Proxy": "*"}`), field: "env.No_Proxy", contains: []string{"reserved"}},
		{name: "env MY_PROXY free", body: validBody(`"env": {"MY_PROXY": "x"}`), valid: true},
		// npm reads its npm_config_ names in any case, pip its PIP_ names
		// in any case after the prefix (the network probe of 2026-12-05).
		{name: "env Npm_Config_Registry reserved", body: validBody(`"env": {"Npm_Config_Registry": "http://x"}`), field: "env.Npm_Config_Registry", contains: []string{"reserved"}},
		{name: "env PIP_Index_Url reserved", body: validBody(`"env": {"PIP_Index_Url": "http://x"}`), field: "env.PIP_Index_Url", contains: []string{"reserved"}},
		{name: "env pip_index_url free", body: validBody(`"env": {"pip_index_url": "x"}`), valid: true},
		{name: "env npm_config_cache free", body: validBody(`"env": {"npm_config_cache": "/tmp/c"}`), valid: true},
		// What execve takes: one NAME=VALUE of jail.MaxEnvString bytes, and
		// jail.MaxEnvTotal for all of them with their NULs.
		{name: "env value at execve's string limit", body: validBody(`"env": {"BIG": "` + strings.Repeat("x", jail.MaxEnvString-4) + `"}`), valid: true},
		{name: "env value past execve's string limit", body: validBody(`"env": {"BIG": "` + strings.Repeat("x", jail.MaxEnvString-3) + `"}`), field: "env.BIG", contains: []string{"E2BIG", "131072 bytes", "write it to a file"}},
		{name: "env past execve's total", body: validBody(`"env": ` + jsonBigEnv(16, 127<<10)), field: "env", contains: []string{"2 MiB", "2031616"}},

		// The body's encoding: encoding/json would turn what is not UTF-8,
		// and half a surrogate pair, into U+FFFD.
		// The error names the member holding the bad byte.
		{name: "env value not UTF-8", body: validBody("\"env\": {\"A\": \"\xff\"}"), field: "env.A", contains: []string{"not UTF-8", "0xff"}},
		{name: "env name not UTF-8", body: validBody("\"env\": {\"OK\": \"1\", \"A\xff\": \"1\"}"), field: "env", contains: []string{"not UTF-8", "0xff"}},
		{name: "code not UTF-8", body: validBody("\"code\": \"print('\xc3(')\""), field: "code", contains: []string{"not UTF-8", "0xc3"}},
		{name: "package not UTF-8", body: validBody("\"packages\": [\"a\", \"b\xfe\"]"), field: "packages[1]", contains: []string{"not UTF-8", "0xfe"}},
		{name: "domain not UTF-8", body: validBody("\"network\": {\"mode\": \"domains\", \"domains\": [\"a.test\", {\"x\": 1}, \"\xff.test\"]}"), field: "network.domains[2]", contains: []string{"not UTF-8"}},
		{name: "member name not UTF-8", body: "{\"language\": \"python\", \"\xffcode\": \"print(1)\"}", field: "", contains: []string{"the body holds", "not UTF-8"}},
		{name: "member name not UTF-8 after an unknown member", body: "{\"language\": \"python\", \"code\": \"print(1)\", \"extra\": 1, \"\xff\": 1}", field: "", contains: []string{"the body holds", "not UTF-8"}},
		{name: "unknown member not UTF-8", body: validBody("\"extra\": {\"a\": [\"\xff\"]}"), field: "", contains: []string{"the body holds", "not UTF-8"}},
		{name: "array body not UTF-8", body: "[{\"code\": \"\xff\"}]", field: "", contains: []string{"the body holds", "not UTF-8"}},
		{name: "byte outside a string", body: "{\"language\": \"python\"\xff}", field: "", contains: []string{"the body holds", "not UTF-8"}},
		// A body cut short said only what a body must be.
		{name: "body cut short", body: `{"language":"python","code":"1"`, field: "", contains: []string{"ends at byte 31 before the object closes: was the body cut short?"}},
		{name: "lone high surrogate", body: validBody(`"code": "print('\ud800')"`), field: "code", contains: []string{"surrogate", `\ud800`}},
		{name: "lone low surrogate", body: validBody(`"code": "print('\udc00')"`), field: "code", contains: []string{"surrogate", `\udc00`}},
		{name: "high surrogate then other escape", body: validBody(`"code": "print('\ud800\u0041')"`), field: "code", contains: []string{"surrogate"}},
		{name: "surrogate in an env value", body: validBody(`"env": {"A": "1", "B": "x\udc00"}`), field: "env.B", contains: []string{"surrogate"}},
		{name: "surrogate pair", body: validBody(`"code": "print('\ud83d\ude00')"`), valid: true,
			check: func(t *testing.T, req api.Request) {
				if req.Code != "print('\U0001F600')" {
					t.Errorf("code %q, want the emoji", req.Code)
				}
			}},
		{name: "escaped backslash before u", body: validBody(`"code": "print('\\ud800')"`), valid: true,
			check: func(t *testing.T, req api.Request) {
				if req.Code != `print('\ud800')` {
					t.Errorf("code %q, want a backslash and ud800", req.Code)
				}
			}},
		{name: "literal U+FFFD", body: validBody(`"code": "print('\ufffd�')"`), valid: true},
		{name: "id dot", body: validBody(`"id": "."`), field: "id", contains: []string{"path segment"}},
		{name: "id dot dot", body: validBody(`"id": ".."`), field: "id", contains: []string{"path segment"}},
		{name: "id three dots", body: validBody(`"id": "..."`), valid: true},
		{name: "env NUL in value", body: validBody(`"env": {"A": "x\u0000y"}`), field: "env.A"},
		{name: "env number value", body: validBody(`"env": {"A": 1}`), field: "env.A"},
		{name: "env null value", body: validBody(`"env": {"A": null}`), field: "env.A"},
		{name: "env array", body: validBody(`"env": ["A=1"]`), field: "env"},

		// network
		{name: "network none", body: validBody(`"network": {"mode": "none"}`), valid: true},
		{name: "network registries", body: validBody(`"network": {"mode": "registries"}`), valid: true, check: wantDecodedMode(api.NetworkRegistries)},
		{name: "network any", body: validBody(`"network": {"mode": "any"}`), valid: true, check: wantDecodedMode(api.NetworkAny)},
		{name: "network mode bogus", body: validBody(`"network": {"mode": "bogus"}`), field: "network.mode"},
		{name: "network mode number", body: validBody(`"network": {"mode": 1}`), field: "network.mode"},
		{name: "network mode null", body: validBody(`"network": {"mode": null}`), field: "network.mode"},
		{name: "network mode empty string", body: validBody(`"network": {"mode": ""}`), field: "network.mode"},
		{name: "network domains with mode none", body: validBody(`"network": {"mode": "none", "domains": ["example.com"]}`), field: "network.domains"},
		{name: "network domains without mode", body: validBody(`"network": {"domains": ["example.com"]}`), field: "network.domains"},
		{name: "network domains 0", body: validBody(`"network": {"mode": "domains", "domains": []}`), field: "network.domains"},
		{name: "network domains missing", body: validBody(`"network": {"mode": "domains"}`), field: "network.domains", contains: []string{"is missing or empty"}},
		{name: "a byte-order mark", body: "\ufeff" + validBody(), field: "", contains: []string{"byte-order mark"}},
		{name: "network domains 1", body: validBody(`"network": {"mode": "domains", "domains": ["example.com"]}`), valid: true, check: wantDecodedMode(api.NetworkDomains)},
		{name: "network domains 100", body: validBody(`"network": {"mode": "domains", "domains": ` + jsonStrings(api.MaxDomains, func(i int) string { return fmt.Sprintf("h%d.example.com", i) }) + `}`), valid: true},
		{name: "network domains 101", body: validBody(`"network": {"mode": "domains", "domains": ` + jsonStrings(api.MaxDomains+1, func(i int) string { return fmt.Sprintf("h%d.example.com", i) }) + `}`), field: "network.domains"},
		{name: "network domain of another type", body: validBody(`"network": {"mode": "domains", "domains": ["a.example.com", 5]}`), field: "network.domains[1]", contains: []string{"must be a string"}},
		{name: "network domain null", body: validBody(`"network": {"mode": "domains", "domains": ["a.example.com", null]}`), field: "network.domains[1]", contains: []string{"must be a string"}},
		{name: "network domains not an array", body: validBody(`"network": {"mode": "domains", "domains": "a.example.com"}`), field: "network.domains"},
		{name: "network domain wildcard", body: validBody(`"network": {"mode": "domains", "domains": ["*.example.com"]}`), field: "network.domains[0]"},
		{name: "network domain URL at 1", body: validBody(`"network": {"mode": "domains", "domains": ["example.com", "https://example.org/"]}`), field: "network.domains[1]"},
		{name: "network domains not strings", body: validBody(`"network": {"mode": "domains", "domains": [1]}`), field: "network.domains[0]"},
		{name: "network unknown field", body: validBody(`"network": {"mode": "none", "extra": 1}`), field: "network.extra"},
		{name: "network string", body: validBody(`"network": "none"`), field: "network"},
		{name: "network array", body: validBody(`"network": []`), field: "network"},
		{name: "network null", body: validBody(`"network": null`), field: "network"},

		// unknown fields
		{name: "unknown field", body: validBody(`"timeout": 30`), field: "timeout", contains: []string{"timeout_seconds"}},
		{name: "unknown field case", body: validBody(`"Code": "x"`), field: "Code"},

		// the first bad field in API.md's order
		{name: "first bad: language before timeout value", body: validBody(`"language": "ruby"`, `"timeout_seconds": 0`), field: "language"},
		{name: "first bad: language before timeout type", body: validBody(`"language": "ruby"`, `"timeout_seconds": "30"`), field: "language"},
		{name: "first bad: language before null memory", body: validBody(`"language": "ruby"`, `"memory_mib": null`), field: "language"},
		{name: "first bad: code before network type", body: validBody(`"code": ""`, `"network": "any"`), field: "code"},
		{name: "first bad: id before language", body: validBody(`"id": "a b"`, `"language": "ruby"`), field: "id"},
		{name: "first bad: memory before env", body: validBody(`"memory_mib": 1`, `"env": {"PATH": "x"}`), field: "memory_mib"},
		{name: "first bad: packages before network", body: validBody(`"packages": ["requests"]`, `"network": {"mode": "bogus"}`), field: "packages[0]"},

		// a name given twice: encoding/json keeps the last, another reader may
		// keep the first, so the request is refused whatever the values
		{name: "code twice", body: `{"language": "python", "code": "print(1)", "code": "print(2)"}`, field: "code", contains: []string{"twice"}},
		{name: "language twice", body: `{"language": "ruby", "language": "python", "code": "print(1)"}`, field: "language"},
		{name: "same value twice", body: `{"language": "python", "language": "python", "code": "print(1)"}`, field: "language"},
		{name: "network mode twice", body: validBody(`"network": {"mode": "any", "mode": "none"}`), field: "network.mode"},
		{name: "env name twice", body: validBody(`"env": {"A": "1", "B": "2", "A": "3"}`), field: "env.A"},
		{name: "names differing in case", body: validBody(`"env": {"A": "1", "a": "2"}`), valid: true},

		// bodies that are not one object
		{name: "array body", body: `[]`, field: ""},
		{name: "string body", body: `"x"`, field: ""},
		{name: "empty body", body: ``, field: ""},
		{name: "truncated body", body: `{`, field: ""},
		{name: "null body", body: `null`, field: ""},
		{name: "number body", body: `1`, field: ""},
		{name: "trailing object", body: validBody() + ` {}`, field: ""},
		{name: "trailing number", body: validBody() + ` 1`, field: ""},
		{name: "trailing garbage", body: validBody() + ` x`, field: ""},
		{name: "trailing bracket", body: validBody() + `]`, field: ""},
		{name: "whitespace after", body: validBody() + " \n\t", valid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, aerr := decodeRequest([]byte(tc.body))
			if tc.valid {
				if aerr != nil {
					t.Fatalf("got error %s %q: %s, want the request accepted", aerr.body.Code, aerr.body.Field, aerr.body.Message)
				}
				checkDecodedDefaults(t, []byte(tc.body), req)
				if tc.check != nil {
					tc.check(t, req)
				}
				return
			}
			if aerr == nil {
				t.Fatalf("got the request accepted (%s), want an error on field %q", jsonOf(req), tc.field)
			}
			checkDecodeRefusalBasics(t, aerr)
			if aerr.body.Field != tc.field {
				t.Fatalf("got field %q (%s), want %q", aerr.body.Field, aerr.body.Message, tc.field)
			}
			for _, s := range tc.contains {
				if !strings.Contains(aerr.body.Message, s) {
					t.Errorf("got message %q, want it to contain %q", aerr.body.Message, s)
				}
			}
		})
	}
}

// checkDecodeRefusalBasics checks what every refusal of decodeRequest has: invalid_request,
// status 400, and a message in words a model can act on.
func checkDecodeRefusalBasics(t *testing.T, aerr *apiError) {
	t.Helper()
	if aerr.body.Code != api.ErrorInvalidRequest {
		t.Errorf("got code %q, want %q", aerr.body.Code, api.ErrorInvalidRequest)
	}
	if got := statusOf(aerr.body.Code); got != http.StatusBadRequest {
		t.Errorf("got status %d, want %d", got, http.StatusBadRequest)
	}
	if strings.TrimSpace(aerr.body.Message) == "" {
		t.Errorf("got an empty message, want one that says what to do")
	}
	for _, s := range goInternalTexts {
		if strings.Contains(aerr.body.Message, s) {
			t.Errorf("got message %q, want no Go-internal text like %q", aerr.body.Message, s)
		}
	}
}

// checkDecodedDefaults checks that an accepted request has every default filled in
// where body left its field out.
func checkDecodedDefaults(t *testing.T, body []byte, req api.Request) {
	t.Helper()
	var given map[string]json.RawMessage
	if err := json.Unmarshal(body, &given); err != nil {
		t.Fatalf("test body does not decode: %v", err)
	}
	if _, ok := given["timeout_seconds"]; !ok && (req.TimeoutSeconds == nil || *req.TimeoutSeconds != api.DefaultTimeoutSeconds) {
		t.Errorf("got timeout_seconds %v, want the default %d", intPtrString(req.TimeoutSeconds), api.DefaultTimeoutSeconds)
	}
	if _, ok := given["memory_mib"]; !ok && (req.MemoryMiB == nil || *req.MemoryMiB != api.DefaultMemoryMiB) {
		t.Errorf("got memory_mib %v, want the default %d", intPtrString(req.MemoryMiB), api.DefaultMemoryMiB)
	}
	if req.TimeoutSeconds == nil || req.MemoryMiB == nil {
		t.Errorf("got timeout %v, memory %v, want both set", intPtrString(req.TimeoutSeconds), intPtrString(req.MemoryMiB))
	}
	if req.Packages == nil {
		t.Errorf("got packages nil, want [] (non-nil)")
	}
	if req.Env == nil {
		t.Errorf("got env nil, want {} (non-nil)")
	}
	if req.Network == nil {
		t.Fatalf("got network nil, want {\"mode\": \"none\"}")
	}
	if _, ok := given["network"]; !ok && (req.Network.Mode != api.NetworkNone || len(req.Network.Domains) != 0) {
		t.Errorf("got network %+v, want the default mode none", *req.Network)
	}
	if _, ok := given["packages"]; !ok && len(req.Packages) != 0 {
		t.Errorf("got packages %v, want []", req.Packages)
	}
	if _, ok := given["env"]; !ok && len(req.Env) != 0 {
		t.Errorf("got env %v, want {}", req.Env)
	}
}

func intPtrString(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func wantDecodedID(id string) func(*testing.T, api.Request) {
	return func(t *testing.T, req api.Request) {
		if req.ID != id {
			t.Errorf("got id %q, want %q", req.ID, id)
		}
	}
}

func wantDecodedTimeout(s int) func(*testing.T, api.Request) {
	return func(t *testing.T, req api.Request) {
		if req.TimeoutSeconds == nil || *req.TimeoutSeconds != s {
			t.Errorf("got timeout_seconds %s, want %d", intPtrString(req.TimeoutSeconds), s)
		}
	}
}

func wantDecodedMemory(m int) func(*testing.T, api.Request) {
	return func(t *testing.T, req api.Request) {
		if req.MemoryMiB == nil || *req.MemoryMiB != m {
			t.Errorf("got memory_mib %s, want %d", intPtrString(req.MemoryMiB), m)
		}
	}
}

func wantDecodedMode(mode string) func(*testing.T, api.Request) {
	return func(t *testing.T, req api.Request) {
		if req.Network == nil || req.Network.Mode != mode {
			t.Errorf("got network %+v, want mode %q", req.Network, mode)
		}
	}
}

// TestValidateIDEveryByte checks every single byte as an id: exactly the
// characters of API.md are accepted.
func TestValidateIDEveryByte(t *testing.T) {
	for c := 0; c < 256; c++ {
		id := string(rune(c))
		// "." alone is a path segment, which HTTP removes from /v1/runs/{id}.
		want := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("_:-", rune(c))
		_, aerr := decodeRequest([]byte(validBody(`"id": ` + jsonQuote(id))))
		if got := aerr == nil; got != want {
			t.Errorf("id %q: got accepted %v, want %v", id, got, want)
		}
		if aerr != nil && aerr.body.Field != "id" {
			t.Errorf("id %q: got field %q, want \"id\"", id, aerr.body.Field)
		}
	}
}

// TestLimitsPatterns holds GET /v1/limits' id_pattern and env_name_pattern to
// the service's own checks: every byte alone and in a name's later places,
// and the length bounds.
func TestLimitsPatterns(t *testing.T) {
	idRE, envRE := regexp.MustCompile(api.IDPattern), regexp.MustCompile(api.EnvNamePattern)
	var ids, names []string
	for c := 0; c < 256; c++ {
		ids = append(ids, "a"+string(rune(c)), string(rune(c)))
		names = append(names, string(rune(c)), "A"+string(rune(c)))
	}
	ids = append(ids, strings.Repeat("x", api.MaxIDChars), strings.Repeat("x", api.MaxIDChars+1), "...", "a.b")
	for _, id := range ids {
		_, aerr := decodeRequest([]byte(validBody(`"id": ` + jsonQuote(id))))
		want := idRE.MatchString(id) && id != "." && id != ".."
		if got := aerr == nil; got != want {
			t.Errorf("id %q: got accepted %v, id_pattern (and not . or ..) says %v", id, got, want)
		}
	}
	for _, name := range names {
		if slices.Contains(jail.ReservedEnvNames(), name) {
			continue
		}
		_, aerr := decodeRequest([]byte(validBody(`"env": {` + jsonQuote(name) + `: "1"}`)))
		if got, want := aerr == nil, envRE.MatchString(name); got != want {
			t.Errorf("env name %q: got accepted %v, env_name_pattern says %v", name, got, want)
		}
	}
}

func TestRequestKey(t *testing.T) {
	mustDecode := func(t *testing.T, b string) api.Request {
		t.Helper()
		req, aerr := decodeRequest([]byte(b))
		if aerr != nil {
			t.Fatalf("decoding %s: got %v, want a request", b, aerr)
		}
		return req
	}
	plain := mustDecode(t, validBody())
	for _, tc := range []struct {
		name string
		body string
		same bool
	}{
		{"itself", validBody(), true},
		{"explicit defaults", validBody(`"timeout_seconds": 30`, `"memory_mib": 512`, `"packages": []`, `"env": {}`, `"network": {"mode": "none"}`), true},
		{"empty network object", validBody(`"network": {}`), true},
		{"defaults written as floats", validBody(`"timeout_seconds": 30.0`, `"memory_mib": 5.12e2`), true},
		{"another id", validBody(`"id": "retry-1"`), true},
		{"members in another order", `{"code": "print(1)", "memory_mib": 512, "language": "python"}`, true},
		{"another code", validBody(`"code": "print(2)"`), false},
		{"another language", validBody(`"language": "javascript"`), false},
		{"another timeout", validBody(`"timeout_seconds": 31`), false},
		{"another memory", validBody(`"memory_mib": 513`), false},
		{"an env entry", validBody(`"env": {"A": "1"}`), false},
		{"another network", validBody(`"network": {"mode": "any"}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mustDecode(t, tc.body)
			got, want := requestKey(req), requestKey(plain)
			if (got == want) != tc.same {
				t.Fatalf("got key %s for %s and %s for %s, want same=%v", got, tc.body, want, validBody(), tc.same)
			}
		})
	}
	t.Run("sets in another order", func(t *testing.T) {
		// A harness that builds them from a set sends them in any order; a
		// domain as ParseDomain normalises it, duplicates once.
		for _, pair := range [][2]string{
			{`"network": {"mode": "domains", "domains": ["a.example.com", "b.example.com"]}`, `"network": {"mode": "domains", "domains": ["B.example.com.", "a.example.com", "A.EXAMPLE.COM"]}`},
			{`"packages": ["six==1.16.0", "attrs>=0"]`, `"packages": ["attrs>=0", "six==1.16.0"]`},
		} {
			a, b := mustDecode(t, validBody(pair[0])), mustDecode(t, validBody(pair[1]))
			if requestKey(a) != requestKey(b) {
				t.Errorf("got different keys for %s and %s, want the same", pair[0], pair[1])
			}
			if requestKey(a) == requestKey(mustDecode(t, validBody())) {
				t.Errorf("got the key of a request without %s, want another", pair[0])
			}
		}
		d := mustDecode(t, validBody(`"network": {"mode": "domains", "domains": ["b.example.com", "a.example.com"]}`))
		requestKey(d)
		if d.Network.Domains[0] != "b.example.com" {
			t.Errorf("requestKey reordered the request's own domains: %v", d.Network.Domains)
		}
	})
	t.Run("env order", func(t *testing.T) {
		a := mustDecode(t, validBody(`"env": {"A": "1", "B": "2"}`))
		b := mustDecode(t, validBody(`"env": {"B": "2", "A": "1"}`))
		if requestKey(a) != requestKey(b) {
			t.Fatalf("got different keys for one env in two orders, want the same")
		}
	})
	t.Run("id does not change it", func(t *testing.T) {
		a := mustDecode(t, validBody(`"id": "one"`))
		b := mustDecode(t, validBody(`"id": "two"`))
		if requestKey(a) != requestKey(b) {
			t.Fatalf("got different keys for two ids, want the same")
		}
		if a.ID != "one" {
			t.Fatalf("got id %q after requestKey, want it untouched (%q)", a.ID, "one")
		}
	})
}

// TestNullSaysLeaveItOutOnce: a null field's message says once what leaving
// it out does (an audit found "..., or left out to get a generated id, or
// leave it out for its default" for the id).
func TestNullSaysLeaveItOutOnce(t *testing.T) {
	for field := range typeHint {
		prefix, k := "", field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			prefix, k = field[:i], field[i+1:]
		}
		e := refuseNull(prefix, k, json.RawMessage("null"))
		if e == nil {
			t.Fatalf("%s: null accepted", field)
		}
		msg := e.body.Message
		if n := strings.Count(msg, "leave it out") + strings.Count(msg, "left out"); n > 1 {
			t.Errorf("%s: %q says %d times what leaving it out does", field, msg, n)
		}
	}
}

// An error quotes what was sent, clipped: a value of megabytes comes back as a
// few kilobytes that still say what is wrong and what to do, and the field
// still names where (an audit's 600 kB env name came back whole, past what
// the clients read of an error).
func TestRefusalsClipWhatTheyQuote(t *testing.T) {
	big := strings.Repeat("a", 600_000)
	for _, tt := range []struct {
		name, body, field, ends string
	}{
		{"env name", validBody(`"env": {"1` + big + `": "x"}`), "env.1aaa", "not starting with a digit"},
		{"unknown field", validBody(`"` + big + `": 1`), "aaa", "the fields are id, language, code, timeout_seconds, memory_mib, packages, env, network"},
		{"language", validBody(`"language": "` + big + `"`), "language", ""},
		{"package", validBody(`"packages": ["` + big + `"]`), "packages[0]", ""},
		{"domain", validBody(`"network": {"mode": "domains", "domains": ["` + big + `"]}`), "network.domains[0]", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeRequest([]byte(tt.body))
			if err == nil {
				t.Fatal("accepted, want a refusal")
			}
			e := err.body
			if len(e.Field) > maxFieldBytes || !strings.HasPrefix(e.Field, tt.field) {
				t.Errorf("field: got %d bytes beginning %.40q, want at most %d beginning %q", len(e.Field), e.Field, maxFieldBytes, tt.field)
			}
			if len(e.Message) > maxMessageBytes || !strings.HasSuffix(e.Message, tt.ends) || !utf8.ValidString(e.Message) {
				t.Errorf("message: got %d bytes ending %q, want at most %d, UTF-8, ending %q", len(e.Message), e.Message[max(0, len(e.Message)-120):], maxMessageBytes, tt.ends)
			}
		})
	}
}
