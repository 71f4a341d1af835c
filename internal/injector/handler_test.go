package injector

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/spoolmq/spool/sidecar/config"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the handler's answers")

const testDefaults = `
image: spool/spoold:v0.9.0
redis_addrs: ["redis.spool:6379"]
redis_password_secret: {name: spool-redis, key: password}
redis_tls_secret: spool-redis-tls
redis_tls_server_name: redis.spool.svc
cpu_request: 250m
memory_request: 128Mi
memory_limit: 512Mi
cluster_tls_secret: spool-peer-tls
cluster_join_secret: spool-join-secret
trusted_namespaces: [shop]
`

// outcome is what a golden file holds: the answer, and the pod as the API
// server would store it after applying the patch.
type outcome struct {
	UID      string          `json:"uid"`
	Allowed  bool            `json:"allowed"`
	Message  string          `json:"message,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
	Patched  bool            `json:"patched"`
	Pod      json.RawMessage `json:"pod,omitempty"`
}

// Every AdmissionReview in testdata goes through the HTTP handler; the
// answer and the patched pod must match its golden file, the patched pod
// must decode strictly as a core/v1 Pod, and injecting it again changes
// nothing.
func TestHandlerGolden(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(&Handler{Defaults: d})
	defer srv.Close()
	files, _ := filepath.Glob("testdata/*.json")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".golden.json") {
			continue
		}
		n++
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			reqBody, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var in admissionv1.AdmissionReview
			if err := json.Unmarshal(reqBody, &in); err != nil {
				t.Fatal(err)
			}
			out := post(t, srv, reqBody)
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
				t.Fatalf("answer is not an admission.k8s.io/v1 AdmissionReview with a response: %+v", out)
			}
			r := out.Response
			got := outcome{UID: string(r.UID), Allowed: r.Allowed, Warnings: r.Warnings}
			if r.UID != in.Request.UID {
				t.Errorf("response uid %q, request uid %q: the API server rejects an answer to another request", r.UID, in.Request.UID)
			}
			if r.Result != nil {
				got.Message = r.Result.Message
			}
			if len(r.Patch) > 0 {
				if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patch without patchType JSONPatch")
				}
				got.Patched = true
				patched := applyPatch(t, in.Request.Object.Raw, r.Patch)
				pod := decodePodStrict(t, patched)
				again, err := Inject(pod, d)
				if err != nil || len(again.Patch) != 0 {
					t.Errorf("injecting the injected pod again: patch %v, err %v; want no change", again.Patch, err)
				}
				var indented bytes.Buffer
				_ = json.Indent(&indented, patched, "", "  ")
				got.Pod = indented.Bytes()
			}
			golden := strings.TrimSuffix(f, ".json") + ".golden.json"
			b, _ := json.MarshalIndent(got, "", "  ")
			b = append(b, '\n')
			if *update {
				if err := os.WriteFile(golden, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/injector -update to write it, then read it)", err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("answer differs from %s (go test -update rewrites it):\n%s", golden, b)
			}
		})
	}
	if n < 5 {
		t.Fatalf("only %d AdmissionReviews in testdata", n)
	}
}

func post(t *testing.T, srv *httptest.Server, body []byte) admissionv1.AdmissionReview {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// What the handler refuses to read gets a 4xx that says what it wanted.
func TestHandlerBadRequests(t *testing.T) {
	srv := httptest.NewServer(&Handler{Defaults: Defaults{Image: "x"}})
	defer srv.Close()
	for _, c := range []struct {
		method, body string
		code         int
		says         string
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed, "POST an AdmissionReview"},
		{http.MethodPost, "{", http.StatusBadRequest, "not an admission.k8s.io/v1 AdmissionReview"},
		{http.MethodPost, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest, "with a request"},
		{http.MethodPost, strings.Repeat(" ", MaxReviewBytes+1), http.StatusRequestEntityTooLarge, "over"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+"/mutate", strings.NewReader(c.body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(b.String(), c.says) {
			t.Errorf("%s %.20q: %d %q; want %d saying %q", c.method, c.body, resp.StatusCode, b.String(), c.code, c.says)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	for _, c := range []struct{ in, says string }{
		{"", "image is required"},
		{"image: x\nimage_pull_policy: Sometimes", "must be Always, IfNotPresent or Never"},
		{"image: x\nmemory_limit: a lot", "not a Kubernetes quantity"},
		{"image: x\nredis_password_secret: {name: s}", "needs both name and key"},
		{"image: x\nimagee: y", "field imagee not found"},
		{"image: x\ncluster_join: [spool-peers]", "\"spool-peers\" is not host:port"},
		{"image: x\ncluster_join: [\"spool-peers:7072\"]", "cluster_join needs cluster_tls_secret"},
		{"image: x\ncluster_tls_secret: a\ncluster_insecure: true", "cluster_tls_secret and cluster_insecure: set one"},
		{"image: x\nredis_addrs: [\"redis.spool:6379\"]", "redis_addrs needs redis_tls_secret"},
		{"image: x\nredis_addrs: [\"redis.spool:6379\"]", "redis_insecure: true"},
		{"image: x\nredis_tls_secret: a\nredis_insecure: true", "redis_tls_secret and redis_insecure: set one"},
		{"image: x\nredis_tls_server_name: r\nredis_insecure: true", "set one"},
	} {
		_, err := ParseDefaults([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v; want an error saying %q", c.in, err, c.says)
		}
	}
	d, err := ParseDefaults([]byte("image: x"))
	if err != nil || d.DrainTimeout != DefaultDrainTimeout || d.ImagePullPolicy != "IfNotPresent" {
		t.Fatalf("defaults not filled: %+v %v", d, err)
	}
}

func decodePodStrict(t *testing.T, b []byte) *corev1.Pod {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var pod corev1.Pod
	if err := dec.Decode(&pod); err != nil {
		t.Fatalf("patched pod does not decode as a core/v1 Pod: %v", err)
	}
	return &pod
}

// applyPatch applies the "add" operations of an RFC 6902 patch (the only
// ones the injector makes; any other fails the test) to doc.
func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("op %q: the injector only adds", op.Op)
		}
		var v any
		if err := json.Unmarshal(op.Value, &v); err != nil {
			t.Fatal(err)
		}
		var err error
		if root, err = add(root, splitPointer(op.Path), v); err != nil {
			t.Fatalf("%s: %v", op.Path, err)
		}
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func splitPointer(p string) []string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts
}

func add(node any, path []string, v any) (any, error) {
	key := path[0]
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			n[key] = v
			return n, nil
		}
		child, ok := n[key]
		if !ok {
			return nil, fmt.Errorf("no member %q", key)
		}
		c, err := add(child, path[1:], v)
		n[key] = c
		return n, err
	case []any:
		if len(path) == 1 {
			if key == "-" {
				return append(n, v), nil
			}
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i > len(n) {
				return nil, fmt.Errorf("bad array index %q", key)
			}
			return append(n[:i], append([]any{v}, n[i:]...)...), nil
		}
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(n) {
			return nil, fmt.Errorf("bad array index %q", key)
		}
		c, err := add(n[i], path[1:], v)
		n[i] = c
		return n, err
	}
	return nil, fmt.Errorf("cannot add below %T", node)
}

// spoold accepts the flags the injector gives it (without a config file:
// the file is the user's, checked where it is written).
func TestInjectedArgsAreAcceptedBySpoold(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(ann map[string]string) *config.Config {
		t.Helper()
		pod := &corev1.Pod{}
		pod.Namespace, pod.Annotations = "shop", ann
		res, err := Inject(pod, d)
		if err != nil {
			t.Fatal(err)
		}
		var c corev1.Container
		b, _ := json.Marshal(res.Patch[0].Value.([]corev1.Container)[0])
		_ = json.Unmarshal(b, &c)
		env := map[string]string{"SPOOL_NODE_ID": "email-worker-7d9f8c6b5d-x2x9q", "SPOOL_REDIS_PASSWORD": "secret"}
		cfg, err := config.Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), c.Args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("spoold refuses the injected flags %q: %v", c.Args, err)
		}
		// AdminService stays inside the pod; kubelet and Prometheus use
		// the probe listener, on the pod IP.
		if !config.LoopbackOrUnix(cfg.Node.AdminListen) || cfg.Node.ProbeListen == "" || config.LoopbackOrUnix(cfg.Node.ProbeListen) {
			t.Fatalf("injected admin_listen %q, probe_listen %q: want loopback admin and a probe listener on the pod IP", cfg.Node.AdminListen, cfg.Node.ProbeListen)
		}
		probePort := strconv.Itoa(ProbePort)
		if !strings.HasSuffix(cfg.Node.ProbeListen, ":"+probePort) || len(c.Ports) != 1 || c.Ports[0].ContainerPort != ProbePort {
			t.Fatalf("probe_listen %q, container ports %+v", cfg.Node.ProbeListen, c.Ports)
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p.HTTPGet.Port.String() != c.Ports[0].Name {
				t.Errorf("probe %s on port %s, not the probe port %s", p.HTTPGet.Path, p.HTTPGet.Port.String(), c.Ports[0].Name)
			}
		}
		for _, op := range res.Patch {
			if strings.HasPrefix(op.Path, "/metadata/annotations") {
				if b, _ := json.Marshal(op.Value); strings.Contains(string(b), "prometheus.io/port") && !strings.Contains(string(b), probePort) {
					t.Errorf("Prometheus is pointed elsewhere than the probe port: %s", b)
				}
			}
		}
		return cfg
	}
	cfg := resolve(map[string]string{AnnotationInject: "true", AnnotationTopics: "orders:12,payments", AnnotationSubscriptions: "orders:billing,payments:audit", AnnotationDrainTimeout: "45s"})
	if cfg.Node.AppListen[0] != SocketAddr || cfg.Node.DataDir != DataDir || len(cfg.Subscriptions) != 2 || cfg.Node.DrainTimeout.String() != "45s" || cfg.Cluster.Enabled() {
		t.Fatalf("spoold's view of the injected flags: %+v, cluster %+v", cfg.Node, cfg.Cluster)
	}
	// It reaches the operator's Redis over TLS, with the Secret's files.
	if rt := cfg.Redis.TLS; rt.CAFile != RedisTLSDir+"/ca.crt" || rt.CertFile != RedisTLSDir+"/tls.crt" || rt.KeyFile != RedisTLSDir+"/tls.key" || rt.ServerName != "redis.spool.svc" || cfg.Guards.InsecurePlaintextRemotes {
		t.Fatalf("redis.tls %+v, insecure_plaintext_remotes %v", rt, cfg.Guards.InsecurePlaintextRemotes)
	}
	// A storage-off client of a cluster, from annotations alone.
	cfg = resolve(map[string]string{AnnotationInject: "true", AnnotationClusterJoin: "orders-spool-peers.shop.svc:7072", AnnotationSubscriptions: "orders:fulfilment", AnnotationTopics: "orders:12"})
	if cfg.Cluster.Storage != config.StorageOff || !slices.Equal(cfg.Cluster.Join, []string{"orders-spool-peers.shop.svc:7072"}) || cfg.Cluster.Listen != "" {
		t.Fatalf("spoold's view of the injected cluster flags: %+v", cfg.Cluster)
	}
	// It reaches the members over mutual TLS with the cluster's
	// certificate and holds its join secret, from the Secrets mounted.
	tls := cfg.Cluster.TLS
	if tls.CertFile != TLSDir+"/tls.crt" || tls.KeyFile != TLSDir+"/tls.key" || tls.CAFile != TLSDir+"/ca.crt" || cfg.Cluster.JoinSecretFile != JoinSecretDir+"/secret" || cfg.Cluster.Insecure {
		t.Fatalf("storage-off sidecar: cluster.tls %+v, join_secret_file %q, insecure %v", tls, cfg.Cluster.JoinSecretFile, cfg.Cluster.Insecure)
	}
	// The explicit opt-out.
	cfg = resolve(map[string]string{AnnotationInject: "true", AnnotationClusterJoin: "orders-spool-peers.shop.svc:7072", AnnotationClusterTLSSecret: "", AnnotationClusterInsecure: "true"})
	if !cfg.Cluster.Insecure || cfg.Cluster.TLS.CertFile != "" {
		t.Fatalf("spool.dev/cluster-insecure: cluster.insecure %v, tls %+v", cfg.Cluster.Insecure, cfg.Cluster.TLS)
	}
}

// A storage-off sidecar whose pod asks for no TLS and does not say
// insecure is refused, naming what to set; single-node sidecars get no
// cluster Secret from the defaults (it need not exist in their namespace).
func TestInjectClusterPeerSecurity(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	inject := func(ann map[string]string) (Result, error) {
		pod := &corev1.Pod{}
		pod.Namespace, pod.Annotations = "shop", ann // trusted: may set the join list
		return Inject(pod, d)
	}
	for _, c := range []struct {
		ann  map[string]string
		says string
	}{
		{map[string]string{AnnotationInject: "true", AnnotationClusterJoin: "a:7072", AnnotationClusterTLSSecret: ""}, "spool.dev/cluster-tls-secret"},
		{map[string]string{AnnotationInject: "true", AnnotationClusterJoin: "a:7072", AnnotationClusterInsecure: "true"}, "set one"},
		{map[string]string{AnnotationInject: "true", AnnotationClusterJoin: "a:7072", AnnotationClusterInsecure: "yes"}, "true or false"},
	} {
		if _, err := inject(c.ann); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v; want a refusal saying %q", c.ann, err, c.says)
		}
	}
	res, err := inject(map[string]string{AnnotationInject: "true"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.Patch)
	if strings.Contains(string(b), "spool-peer-tls") || strings.Contains(string(b), "spool-join-secret") {
		t.Errorf("a single-node sidecar got the cluster's Secrets: %s", b)
	}
}
