package main

// The Kubernetes manifests of deploy/kubernetes are checked here, offline: no
// schema validator can fetch the Kubernetes schemas on CI's network, so the
// fields brig relies on are decoded and checked against brig's own config, and
// the probe and metrics tools they carry run against a real brig serve.

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v4"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
)

const kubeDir = "../../deploy/kubernetes"

// kubeObject is the part of a manifest these tests read.
type kubeObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data      map[string]string `yaml:"data"`
	Resources []string          `yaml:"resources"`
	Spec      struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	HostPID                       bool        `yaml:"hostPID"`
	TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name     string `yaml:"name"`
		HostPath *struct {
			Path string `yaml:"path"`
		} `yaml:"hostPath"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	SecurityContext struct {
		Privileged *bool `yaml:"privileged"`
	} `yaml:"securityContext"`
	Env []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		ContainerPort int `yaml:"containerPort"`
	} `yaml:"ports"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	Exec struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

// kubeManifests decodes every document of deploy/kubernetes/*.yaml, by file.
func kubeManifests(t *testing.T) map[string][]kubeObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubeDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", kubeDir, err)
	}
	out := map[string][]kubeObject{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Fields this test does not model are skipped; a misspelt one that it
		// does is read as empty, and the checks below fail on it.
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var o kubeObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" {
				t.Fatalf("%s: a document without kind", f)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], o)
		}
	}
	return out
}

// kubeObjects gives the decoded objects by kind and name ("DaemonSet/brig").
func kubeObjects(t *testing.T) map[string]kubeObject {
	t.Helper()
	objs := map[string]kubeObject{}
	for f, docs := range kubeManifests(t) {
		for _, o := range docs {
			if o.Kind != "Kustomization" && o.Kind != "Namespace" && o.Metadata.Namespace != "brig" {
				t.Errorf("%s: %s/%s is in namespace %q, want brig", f, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	return objs
}

func findContainer(t *testing.T, ds kubeObject, name string) container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("the DaemonSet has no container %q", name)
	return container{}
}

// TestKubernetesManifests: the DaemonSet, its ConfigMaps and the kustomization
// agree with each other and with brig: the config loads and validates as brig
// serve's, the socket and state directories are the hostPath volumes, the memory
// request covers the runs' budget, the probes and the metrics bridge use a tool
// that the ConfigMap carries.
func TestKubernetesManifests(t *testing.T) {
	objs := kubeObjects(t)
	var files []string
	for f := range kubeManifests(t) {
		if f != "kustomization.yaml" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	kust := objs["Kustomization/"]
	res := slices.Clone(kust.Resources)
	slices.Sort(res)
	if !slices.Equal(res, files) {
		t.Errorf("kustomization.yaml lists %v, want every manifest %v", res, files)
	}

	ds, ok := objs["DaemonSet/brig"]
	if !ok {
		t.Fatal("no DaemonSet brig")
	}
	cm, ok := objs["ConfigMap/brig-config"]
	if !ok {
		t.Fatal("no ConfigMap brig-config")
	}
	tools, ok := objs["ConfigMap/brig-socket-tools"]
	if !ok || tools.Data["brigsock.py"] == "" {
		t.Fatal("no ConfigMap brig-socket-tools with brigsock.py")
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not a label of the pod template", k, v)
		}
	}

	// The config is brig serve's, valid as it would load it.
	path := filepath.Join(t.TempDir(), "brig.toml")
	if err := os.WriteFile(path, []byte(cm.Data["brig.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := loadServeConfig(path)
	if err != nil {
		t.Fatalf("brig-config's brig.toml: %v", err)
	}
	if err := sc.supervisorConfig(nil).Validate(); err != nil {
		t.Fatalf("brig-config's brig.toml: %v", err)
	}
	if sc.SocketGroup == "" || !slices.ContainsFunc(sc.AllowGIDs, func(g int) bool { return itoa(g) == sc.SocketGroup }) {
		t.Errorf("socket_group %q is not in allow_gids %v: harness pods of that group could connect and get 403", sc.SocketGroup, sc.AllowGIDs)
	}
	if sc.MemoryBudgetMiB < api.MaxMemoryMiB {
		t.Errorf("memory_budget_mib %d: set it (at least %d) so that the pod's request can cover it", sc.MemoryBudgetMiB, api.MaxMemoryMiB)
	}

	pod := ds.Spec.Template.Spec
	if pod.HostPID {
		t.Error("hostPID is set; brig does not need it")
	}
	if pod.TerminationGracePeriodSeconds <= int(time.Duration(sc.Grace).Seconds()) {
		t.Errorf("terminationGracePeriodSeconds %d is not more than brig's grace %s: runs would be killed before brig stops them", pod.TerminationGracePeriodSeconds, time.Duration(sc.Grace))
	}
	hostPaths := map[string]string{} // volume name → host path
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	brig := findContainer(t, ds, "brig")
	if brig.SecurityContext.Privileged == nil || !*brig.SecurityContext.Privileged {
		t.Error("the brig container is not privileged: it makes namespaces, mounts and cgroups")
	}
	if !slices.Equal(brig.Args, []string{"serve", "--config", "/etc/brig/brig.toml"}) {
		t.Errorf("brig's args are %v, want serve --config /etc/brig/brig.toml", brig.Args)
	}
	mounts := map[string]string{} // mount path → volume
	for _, m := range brig.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, tc := range []struct{ name, dir string }{
		{"socket directory", filepath.Dir(sc.Socket)},
		{"state directory", sc.StateDir},
		{"cgroup tree", cgroup.DefaultMountRoot},
	} {
		vol, ok := mounts[tc.dir]
		if !ok {
			t.Errorf("the %s %s is not mounted in the brig container", tc.name, tc.dir)
			continue
		}
		if hostPaths[vol] != tc.dir {
			t.Errorf("the %s %s is volume %q, host path %q; want the node's %s", tc.name, tc.dir, vol, hostPaths[vol], tc.dir)
		}
	}
	// The cgroup parents' and the ids' locks are the node's, which a brig
	// installed with systemd on it takes too: in the socket directory's volume.
	for _, dir := range []string{cgroup.DefaultLockDir, jail.IDLockDir} {
		if filepath.Dir(dir) != filepath.Dir(sc.Socket) {
			t.Errorf("the lock folder %s is not in the socket directory %s, the node's", dir, filepath.Dir(sc.Socket))
		}
	}
	if mounts["/etc/brig/brig.toml"] != "config" {
		t.Error("brig.toml is not mounted at /etc/brig/brig.toml")
	}

	// The memory request reserves the runs' budget, whose cgroups the kubelet
	// does not count as the pod's; a limit would bound only brig itself.
	req, err := mebibytes(brig.Resources.Requests["memory"])
	if err != nil || req < sc.MemoryBudgetMiB+256 {
		t.Errorf("the memory request %q (%v) is less than memory_budget_mib %d and 256 MiB for brig", brig.Resources.Requests["memory"], err, sc.MemoryBudgetMiB)
	}
	if _, ok := brig.Resources.Limits["memory"]; ok {
		t.Error("the brig container has a memory limit below its request's budget, or one that bounds only brig: leave it out")
	}
	// And the CPU request what the runs can use at once, and a CPU for brig:
	// the runs' CPU is not the pod's either.
	cpus := sc.Sandbox.CPUs
	if cpus == 0 {
		cpus = 1
	}
	if cpu, err := cores(brig.Resources.Requests["cpu"]); err != nil || cpu < float64(sc.MaxConcurrent)*cpus+1 {
		t.Errorf("the CPU request %q (%v) is less than max_concurrent %d runs at %g CPUs each and one CPU for brig", brig.Resources.Requests["cpu"], err, sc.MaxConcurrent, cpus)
	}

	// Probes and the bridge run the tool the tools ConfigMap carries.
	for what, p := range map[string]*probe{"liveness": brig.LivenessProbe, "readiness": brig.ReadinessProbe} {
		if p == nil || len(p.Exec.Command) != 3 || p.Exec.Command[1] != "/etc/brig/tools/brigsock.py" {
			t.Errorf("the %s probe is %+v, want an exec of /etc/brig/tools/brigsock.py", what, p)
		}
	}
	if mounts["/etc/brig/tools"] != "tools" {
		t.Error("the tools are not mounted at /etc/brig/tools in the brig container")
	}
	bridge := findContainer(t, ds, "metrics-bridge")
	ann := ds.Spec.Template.Metadata.Annotations
	port := ""
	for _, e := range bridge.Env {
		if e.Name == "BRIDGE_PORT" {
			port = e.Value
		}
	}
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != port ||
		len(bridge.Ports) != 1 || itoa(bridge.Ports[0].ContainerPort) != port {
		t.Errorf("the scrape annotations %v, the bridge's BRIDGE_PORT %q and its ports %+v do not agree", ann, port, bridge.Ports)
	}
}

// cores parses a Kubernetes CPU quantity: cores ("5") or millicores ("500m").
func cores(q string) (float64, error) {
	if m, ok := strings.CutSuffix(q, "m"); ok {
		v, err := strconv.ParseFloat(m, 64)
		return v / 1000, err
	}
	return strconv.ParseFloat(q, 64)
}

// mebibytes parses a Kubernetes memory quantity in Mi or Gi.
func mebibytes(q string) (int, error) {
	for suffix, mul := range map[string]int{"Mi": 1, "Gi": 1024} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := atoi(n)
			return v * mul, err
		}
	}
	return 0, os.ErrInvalid
}

// TestKubernetesSocketTools runs the probes and the metrics fetch of the tools
// ConfigMap against a real brig serve, as the kubelet and the sidecar would.
func TestKubernetesSocketTools(t *testing.T) {
	testutil.RequireRoot(t)
	python, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "python3 is not installed")
	tools := kubeObjects(t)["ConfigMap/brig-socket-tools"].Data["brigsock.py"]
	dir := t.TempDir()
	script := filepath.Join(dir, "brigsock.py")
	if err := os.WriteFile(script, []byte(tools), 0o644); err != nil {
		t.Fatal(err)
	}
	socket, serve, logs := startServe(t, "--network-mode", "none")
	run := func(env string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, args...)
		cmd.Env = append(os.Environ(), env)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, mode := range []string{"health", "ready"} {
		if out, err := run("BRIG_SOCKET="+socket, script, mode); err != nil {
			t.Errorf("brigsock.py %s: %v: %s", mode, err, out)
		}
	}
	out, err := run("BRIG_SOCKET="+socket, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import brigsock; "+
		"s, c, b = brigsock.fetch('/metrics'); print(s, c.split(';')[0], b'brig_runs_total' in b or b'brig_http_requests_total' in b)", dir)
	if err != nil || !strings.HasPrefix(out, "200 text/plain True") {
		t.Errorf("fetching /metrics as the bridge does: got %q (%v), want 200 text/plain with brig's metrics", out, err)
	}
	if out, err := run("BRIG_SOCKET="+filepath.Join(dir, "none.sock"), script, "health"); err == nil {
		t.Errorf("brigsock.py health without a service: got success (%s), want a failure", out)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("brig serve exited with %v after SIGTERM; it logged:\n%s", err, logs)
	}
	// A service that refuses root: alive to the liveness probe (a 403 is a
	// live brig, which a failure would restart: the operator probe of
	// 2026-12-06), not ready, and each says why.
	socket, serve, logs = launchServe(t, "--network-mode", "none", "--allow-uid", "65534")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := run("BRIG_SOCKET="+socket, script, "health")
		if err == nil {
			if !strings.Contains(out, "keep 0 in allow_uids") {
				t.Errorf("brigsock.py health against a service that refuses root: got %q, want a word why", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("brigsock.py health against a service that refuses root: got %v: %s, want success; it logged:\n%s", err, out, logs)
		}
	}
	if out, err := run("BRIG_SOCKET="+socket, script, "ready"); err == nil || !strings.Contains(out, "keep 0 in allow_uids") {
		t.Errorf("brigsock.py ready against a service that refuses root: got %v: %s, want a failure that says why", err, out)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("brig serve exited with %v after SIGTERM; it logged:\n%s", err, logs)
	}
	os.Remove(cgroup.ParentLockPath("", cliServeParent))
}

func itoa(n int) string { return strconv.Itoa(n) }

func atoi(s string) (int, error) { return strconv.Atoi(s) }
