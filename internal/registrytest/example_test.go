package registrytest_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/internal/registrytest"
)

// exampleTB stands in for the *testing.T a real test passes: an Example has none. It
// runs the cleanups when the example calls done.
type exampleTB struct {
	testing.TB // nil: calling any method not below would panic
	cleanups   []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A test serves two releases of a project and hands the index to pip:
//
//	python3 -m pip install --no-cache-dir --index-url x.URL() --only-binary=:all: --target DIR "pkg-a<2"
func ExampleNewPyIndex() {
	t := &exampleTB{} // in a test: the test's t
	defer t.done()
	x := registrytest.NewPyIndex(t,
		registrytest.PyPackage{Name: "pkg-a", Version: "1.0", Files: map[string]string{"pkg_a/__init__.py": "VALUE = 1\n"}},
		registrytest.PyPackage{Name: "pkg-a", Version: "2.0", Requires: []string{"dep-b>=1"}, Files: map[string]string{"pkg_a/__init__.py": "VALUE = 2\n"}},
		registrytest.PyPackage{Name: "dep-b", Version: "1.0", Files: map[string]string{"dep_b/__init__.py": ""}},
	)
	for _, line := range strings.Split(get(x.URL()+"pkg-a/"), "\n") {
		if strings.HasPrefix(line, "<a ") {
			fmt.Println(line[strings.Index(line, ">")+1 : strings.Index(line, "</a>")])
		}
	}
	fmt.Println(x.Requests())
	// Output:
	// pkg_a-1.0-py3-none-any.whl
	// pkg_a-2.0-py3-none-any.whl
	// [/simple/pkg-a/]
}

// A test serves a package and its dependency and hands the registry to npm:
//
//	npm install --registry r.URL() --ignore-scripts --no-audit --no-fund --no-update-notifier --prefix DIR app
func ExampleNewNpmRegistry() {
	t := &exampleTB{} // in a test: the test's t
	defer t.done()
	r := registrytest.NewNpmRegistry(t,
		registrytest.NpmPackage{Name: "app", Version: "1.0.0", Dependencies: map[string]string{"@brig/dep": "^1"},
			Files: map[string]string{"index.js": "module.exports = require('@brig/dep')\n"}},
		registrytest.NpmPackage{Name: "@brig/dep", Version: "1.2.0", Type: "module",
			Files: map[string]string{"index.js": "export default 42\n"}},
	)
	packument := get(r.URL() + "@brig%2fdep")
	fmt.Println(strings.Contains(packument, `"tarball":"`+r.URL()+`@brig/dep/-/dep-1.2.0.tgz"`))
	fmt.Println(r.Requests())
	// Output:
	// true
	// [/@brig%2fdep]
}
