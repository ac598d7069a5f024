package api

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPIMatchesGo holds openapi.yaml to this package: every bound,
// default and enum the document states is the Go value of the contract, so
// that the two can't drift apart (internal/apitest then holds the server to
// the document).
func TestOpenAPIMatchesGo(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	schema := func(path ...string) *openapi3.Schema {
		t.Helper()
		ref := doc.Components.Schemas[path[0]]
		for _, p := range path[1:] {
			if ref == nil || ref.Value == nil {
				break
			}
			if p == "[]" {
				ref = ref.Value.Items
			} else {
				ref = ref.Value.Properties[p]
			}
		}
		if ref == nil || ref.Value == nil {
			t.Fatalf("openapi.yaml has no schema at %v", path)
		}
		return ref.Value
	}
	intOf := func(f *float64) any {
		if f == nil {
			return nil
		}
		return int(*f)
	}
	uintOf := func(u *uint64) any {
		if u == nil {
			return nil
		}
		return int(*u)
	}

	for _, tc := range []struct {
		name string
		got  any
		want any
	}{
		{"Request.code minLength", int(schema("Request", "code").MinLength), MinCodeChars},
		{"Request.code maxLength", uintOf(schema("Request", "code").MaxLength), MaxCodeChars},
		{"Request.id pattern", schema("Request", "id").Pattern, idPattern()},
		{"RunID pattern", schema("RunID").Pattern, idPattern()},
		{"Request.timeout_seconds minimum", intOf(schema("Request", "timeout_seconds").Min), MinTimeoutSeconds},
		{"Request.timeout_seconds maximum", intOf(schema("Request", "timeout_seconds").Max), MaxTimeoutSeconds},
		{"Request.timeout_seconds default", schema("Request", "timeout_seconds").Default, float64(DefaultTimeoutSeconds)},
		{"Request.memory_mib minimum", intOf(schema("Request", "memory_mib").Min), MinMemoryMiB},
		{"Request.memory_mib maximum", intOf(schema("Request", "memory_mib").Max), MaxMemoryMiB},
		{"Request.memory_mib default", schema("Request", "memory_mib").Default, float64(DefaultMemoryMiB)},
		{"Request.packages maxItems", uintOf(schema("Request", "packages").MaxItems), MaxPackages},
		{"Request.packages default", fmt.Sprint(schema("Request", "packages").Default), "[]"},
		{"Request.packages[] minLength", int(schema("Request", "packages", "[]").MinLength), MinPackageChars},
		{"Request.packages[] maxLength", uintOf(schema("Request", "packages", "[]").MaxLength), MaxPackageChars},
		{"Request.env maxProperties", uintOf(schema("Request", "env").MaxProps), MaxEnvEntries},
		{"Request.env default", fmt.Sprint(schema("Request", "env").Default), "map[]"},
		{"Network.domains minItems", int(schema("Network", "domains").MinItems), MinDomains},
		{"Network.domains maxItems", uintOf(schema("Network", "domains").MaxItems), MaxDomains},
		{"Result.stdout maxLength", uintOf(schema("Result", "stdout").MaxLength), MaxStdoutChars},
		{"Result.stderr maxLength", uintOf(schema("Result", "stderr").MaxLength), MaxStderrChars},
		{"Result.packages maxItems", uintOf(schema("Result", "packages").MaxItems), MaxPackages},
		{"Event.data maxLength", uintOf(schema("Event", "data").MaxLength), max(MaxStdoutChars, MaxStderrChars)},

		{"Language enum", enum(schema("Language")), Strings(Languages)},
		{"NetworkMode enum", enum(schema("NetworkMode")), Strings(NetworkModes)},
		{"Result.state enum", enum(schema("Result", "state")), Strings(States)},
		{"Result.status enum", enum(schema("Result", "status")), Strings(Statuses)},
		{"Result.reason enum", enum(schema("Result", "reason")), Strings(Reasons)},
		{"Result.outcome enum", enum(schema("Result", "outcome")), Strings(Outcomes)},
		{"Event.event enum", enum(schema("Event", "event")), EventKinds},
		{"Error.code enum", enum(schema("Error", "code")), Strings(ErrorCodes)},
		{"Health.package_languages[] enum", enum(schema("Health", "package_languages", "[]")), Strings(Languages)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
				t.Errorf("openapi.yaml says %v, Go says %v", tc.got, tc.want)
			}
		})
	}
}

func idPattern() string { return fmt.Sprintf("^[A-Za-z0-9._:-]{%d,%d}$", MinIDChars, MaxIDChars) }

// enum is a schema's enum as strings, in the document's order.
func enum(s *openapi3.Schema) []string {
	out := make([]string, len(s.Enum))
	for i, v := range s.Enum {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// TestParse: each Parse accepts exactly its words, refuses anything else with
// ErrUnknown (case and spacing count), and each String gives the word back.
func TestParse(t *testing.T) {
	check := func(name string, words []string, parse func(string) (string, error)) {
		t.Run(name, func(t *testing.T) {
			for _, w := range words {
				got, err := parse(w)
				if err != nil || got != w {
					t.Errorf("parsing %q: got %q, %v; want it back", w, got, err)
				}
			}
			for _, bad := range []string{"", "x", " " + words[0], words[0] + " ", "UPPER" + words[0]} {
				if slices.Contains(words, bad) {
					continue
				}
				if _, err := parse(bad); err == nil || !isUnknown(err) {
					t.Errorf("parsing %q: got %v, want ErrUnknown", bad, err)
				}
			}
		})
	}
	check("Language", Strings(Languages), func(s string) (string, error) { v, err := ParseLanguage(s); return v.String(), err })
	check("State", Strings(States), func(s string) (string, error) { v, err := ParseState(s); return v.String(), err })
	check("Status", Strings(Statuses), func(s string) (string, error) { v, err := ParseStatus(s); return v.String(), err })
	check("Reason", Strings(Reasons), func(s string) (string, error) { v, err := ParseReason(s); return v.String(), err })
	check("Outcome", Strings(Outcomes), func(s string) (string, error) { v, err := ParseOutcome(s); return v.String(), err })
	check("NetworkMode", Strings(NetworkModes), func(s string) (string, error) { v, err := ParseNetworkMode(s); return v.String(), err })
	check("ErrorCode", Strings(ErrorCodes), func(s string) (string, error) { v, err := ParseErrorCode(s); return v.String(), err })
}

func TestOneOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want string
	}{
		{"none", nil, ""},
		{"one", []string{"a"}, `"a"`},
		{"two", []string{"a", "b"}, `"a" or "b"`},
		{"four", Strings(NetworkModes), `"none", "registries", "domains" or "any"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OneOf(tc.in); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func isUnknown(err error) bool { return errors.Is(err, ErrUnknown) }
