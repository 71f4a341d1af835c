package check

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// podsOf returns the pod templates of the Deployments and StatefulSets
// among objs, and the Pods as templates, by source.
func podsOf(objs []object) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			out[o.source] = &w.Spec.Template
		case *appsv1.StatefulSet:
			out[o.source] = &w.Spec.Template
		case *corev1.Pod:
			out[o.source] = &corev1.PodTemplateSpec{ObjectMeta: w.ObjectMeta, Spec: w.Spec}
		}
	}
	return out
}

// restricted checks a pod against the "restricted" Pod Security Standard
// with Kubernetes' own implementation (the one the PodSecurity admission
// controller runs), and spoold's container against what docs/security.md
// promises of it whatever the pod says.
func restricted(t *testing.T, where string, tmpl *corev1.PodTemplateSpec) {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := policy.AggregateCheckResults(ev.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec))
	if !res.Allowed {
		t.Errorf("%s: not allowed at the restricted Pod Security Standard: %s", where, res.ForbiddenDetail())
	}
	for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
		if c.Name != "spoold" {
			continue
		}
		sc := c.SecurityContext
		if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: spoold's securityContext %+v: want seccompProfile RuntimeDefault, runAsNonRoot, readOnlyRootFilesystem, allowPrivilegeEscalation false, drop ALL", where, sc)
		}
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/var/run/secrets/kubernetes.io") {
				t.Errorf("%s: spoold mounts a service account token (%s): it never calls the Kubernetes API", where, m.MountPath)
			}
		}
	}
}

// Every pod the chart renders, with every documented values file, meets
// the restricted Pod Security Standard, and mounts no service account
// token (the pods do not call the API; automountServiceAccountToken: true
// is the app's to ask for).
func TestChartPodSecurity(t *testing.T) {
	for _, vf := range valuesFiles(t) {
		objs, err := render(t, vf, true)
		if err != nil {
			t.Fatal(err)
		}
		tmpls := podsOf(objs)
		if len(tmpls) == 0 {
			t.Fatalf("%s: no workload rendered", cmpOr(filepath.Base(vf), "defaults"))
		}
		for where, tmpl := range tmpls {
			where = cmpOr(filepath.Base(vf), "defaults") + ": " + where
			restricted(t, where, tmpl)
			if a := tmpl.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("%s: automountServiceAccountToken %v, want false", where, a)
			}
		}
	}
}

// The plain manifests' pods meet the same standard and mount no token:
// not the app pods, nor the injector's (it answers the API server's
// admission requests and never calls the API).
func TestManifestsPodSecurity(t *testing.T) {
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (%v)", err)
	}
	files = append(files, "../injector/injector.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(f, b)
		if err != nil {
			t.Fatal(err)
		}
		for where, tmpl := range podsOf(objs) {
			restricted(t, where, tmpl)
			if a := tmpl.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("%s: automountServiceAccountToken %v, want false", where, a)
			}
		}
	}
}

// runAsUserSet fails where a container of tmpl must run as non-root
// (runAsNonRoot, its own or the pod's) and neither it nor the pod names a
// numeric runAsUser: the kubelet then checks the image's USER, and refuses
// to start the container when that is a name ("container has runAsNonRoot
// and image has non-numeric user ... cannot verify user is non-root"), as
// distroless's "nonroot" was.
func runAsUserSet(t *testing.T, where string, tmpl *corev1.PodTemplateSpec) {
	t.Helper()
	psc := tmpl.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
		nonRoot, user := psc.RunAsNonRoot, psc.RunAsUser
		if sc := c.SecurityContext; sc != nil {
			nonRoot, user = cmp.Or(sc.RunAsNonRoot, nonRoot), cmp.Or(sc.RunAsUser, user)
		}
		if nonRoot != nil && *nonRoot && user == nil {
			t.Errorf("%s: container %s has runAsNonRoot and no runAsUser (its own or the pod's): the kubelet refuses to start it when the image's USER is a name; set runAsUser: 65532", where, c.Name)
		}
		if user != nil && *user == 0 {
			t.Errorf("%s: container %s has runAsUser 0", where, c.Name)
		}
	}
}

// Every pod the chart renders (every values file), the manifests' and the
// injector's own pod name a numeric user wherever they ask for non-root.
func TestNonRootPodsNameTheirUser(t *testing.T) {
	for _, vf := range valuesFiles(t) {
		objs, err := render(t, vf, true)
		if err != nil {
			t.Fatal(err)
		}
		for where, tmpl := range podsOf(objs) {
			runAsUserSet(t, cmpOr(filepath.Base(vf), "defaults")+": "+where, tmpl)
		}
	}
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (%v)", err)
	}
	for _, f := range append(files, "../injector/injector.yaml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(f, b)
		if err != nil {
			t.Fatal(err)
		}
		for where, tmpl := range podsOf(objs) {
			runAsUserSet(t, where, tmpl)
		}
	}
}

// networkPolicy returns the one NetworkPolicy among objs.
func networkPolicy(t *testing.T, objs []object) *networkingv1.NetworkPolicy {
	t.Helper()
	var out []*networkingv1.NetworkPolicy
	for _, o := range objs {
		if np, ok := o.obj.(*networkingv1.NetworkPolicy); ok {
			out = append(out, np)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d NetworkPolicies rendered, want 1", len(out))
	}
	return out[0]
}

// ruleFor returns the ingress rules that open port (a name or a number).
func rulesFor(np *networkingv1.NetworkPolicy, port intstr.IntOrString) []networkingv1.NetworkPolicyIngressRule {
	var out []networkingv1.NetworkPolicyIngressRule
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 {
			out = append(out, r) // every port
			continue
		}
		for _, p := range r.Ports {
			if p.Port != nil && *p.Port == port {
				out = append(out, r)
			}
		}
	}
	return out
}

// The chart's NetworkPolicy, with the defaults (a StatefulSet of storage
// nodes): it selects the release's pods; the peer port is open to the
// release's own pods only, the metrics and probe port to the monitoring
// namespace only, and no rule opens every port or every source; egress is
// not restricted. Every port it names is a port of spoold's container, so
// renaming one (the admin port's split) cannot silently close it.
func TestChartNetworkPolicy(t *testing.T) {
	objs, err := render(t, defaultsFile(t), true)
	if err != nil {
		t.Fatal(err)
	}
	np := networkPolicy(t, objs)
	var tmpl *corev1.PodTemplateSpec
	for _, tp := range podsOf(objs) {
		tmpl = tp
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || len(np.Spec.PodSelector.MatchLabels) == 0 || !sel.Matches(labelSet(tmpl.Labels)) {
		t.Fatalf("podSelector %v does not select the workload's pods %v (%v)", np.Spec.PodSelector, tmpl.Labels, err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes %v, want [Ingress] (egress left open)", np.Spec.PolicyTypes)
	}
	ports := map[string]bool{}
	for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
		for _, p := range c.Ports {
			if c.Name == "spoold" {
				ports[p.Name] = true
			}
		}
	}
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 || len(r.From) == 0 {
			t.Errorf("rule %+v opens every port or to every source", r)
		}
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.Type == intstr.String && !ports[p.Port.StrVal] {
				t.Errorf("the policy names port %q, which spoold's container does not have (%v)", p.Port.StrVal, ports)
			}
		}
	}
	peer := rulesFor(np, intstr.FromString("spool-cluster"))
	if len(peer) != 1 || len(peer[0].From) != 1 || peer[0].From[0].NamespaceSelector != nil || peer[0].From[0].IPBlock != nil ||
		peer[0].From[0].PodSelector == nil || fmt.Sprint(peer[0].From[0].PodSelector.MatchLabels) != fmt.Sprint(np.Spec.PodSelector.MatchLabels) {
		t.Errorf("peer port rules %+v: want one, from the release's own pods only", peer)
	}
	admin := rulesFor(np, intstr.FromString("spool-probe"))
	if len(admin) != 1 || len(admin[0].From) != 1 || admin[0].From[0].PodSelector != nil || admin[0].From[0].NamespaceSelector == nil ||
		admin[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("metrics port rules %+v: want one, from the namespace monitoring only", admin)
	}
}

// The app's own ports stay reachable (from appFrom, anyone by default),
// storage-off sidecars have no peer rule (they listen on no peer port),
// and peerFrom adds the sidecars of other releases that join the cluster
// (examples/storage-nodes.yaml).
func TestChartNetworkPolicyOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	defaults := defaultsFile(t)
	objs, err := renderWith(t, renderOpts{install: true}, defaults, write("app.yaml", "app: {ports: [{name: http, containerPort: 8080}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := rulesFor(networkPolicy(t, objs), intstr.FromInt32(8080)); len(r) != 1 || len(r[0].From) != 0 {
		t.Errorf("app port 8080 rules %+v: want one from anywhere", r)
	}
	objs, err = render(t, filepath.Join(chartDir, "examples", "deployment-storage-off.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if r := rulesFor(networkPolicy(t, objs), intstr.FromString("spool-cluster")); len(r) != 0 {
		t.Errorf("storage-off sidecars: peer port rules %+v, want none", r)
	}
	objs, err = render(t, filepath.Join(chartDir, "examples", "storage-nodes.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if r := rulesFor(networkPolicy(t, objs), intstr.FromString("spool-cluster")); len(r) != 1 || len(r[0].From) != 2 {
		t.Errorf("storage nodes for other releases: peer port rules %+v, want the release's pods and peerFrom", r)
	}
	objs, err = renderWith(t, renderOpts{install: true}, defaults, write("off.yaml", "networkPolicy: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.kind == "NetworkPolicy" {
			t.Error("networkPolicy.enabled false still renders a NetworkPolicy")
		}
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

// redis.keyPrefix and redis.tls.secretName reach spoold: the file names
// the prefix and the Secret's files, and spoold's container mounts the
// Secret read-only where the file says.
func TestChartRedisKeyPrefixAndTLS(t *testing.T) {
	vf := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(vf, []byte("redis:\n  addrs: [\"redis.data:6379\"]\n  keyPrefix: \"shop-a:l:\"\n  tls: {secretName: orders-redis-tls, serverName: redis.data.svc}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := renderWith(t, renderOpts{install: true}, defaultsFile(t), vf)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, objs)
	var text string
	for _, o := range objs {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok {
			for _, v := range cm.Data {
				text += v
			}
		}
	}
	text = strings.ReplaceAll(text, "'", "")
	for _, want := range []string{"key_prefix: shop-a:l:", "ca_file: /etc/spool-redis-tls/ca.crt", "cert_file: /etc/spool-redis-tls/tls.crt", "key_file: /etc/spool-redis-tls/tls.key", "server_name: redis.data.svc"} {
		if !strings.Contains(text, want) {
			t.Errorf("spool.yaml lacks %q:\n%s", want, text)
		}
	}
	for where, tmpl := range podsOf(objs) {
		vol := slices.IndexFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "orders-redis-tls"
		})
		if vol < 0 {
			t.Fatalf("%s: no volume of the Secret orders-redis-tls", where)
		}
		for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
			if c.Name == "spoold" && !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == tmpl.Spec.Volumes[vol].Name && m.MountPath == "/etc/spool-redis-tls" && m.ReadOnly
			}) {
				t.Errorf("%s: spoold does not mount the Redis TLS Secret read-only at /etc/spool-redis-tls", where)
			}
		}
	}
}

// Redis beyond the pod in plaintext, the ledger's counterpart of peer TLS:
// redis.addrs without redis.tls does not render unless redis.insecure says
// so, and the message names both; with it, spoold is told so
// (guards.insecure_plaintext_remotes) and the release notes warn. A
// loopback Redis (a container of the pod) needs neither.
func TestChartRedisPlaintextNeedsTheOptOut(t *testing.T) {
	defaults := defaultsFile(t)
	write := func(s string) string {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := writeFile(f, s); err != nil {
			t.Fatal(err)
		}
		return f
	}
	_, err := renderWith(t, renderOpts{install: true}, defaults, write("redis: {addrs: [\"redis.data:6379\"]}\n"))
	for _, want := range []string{"redis.tls", "redis.insecure: true", "Redis ledger"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("plaintext Redis without the opt-out: %v; want a failure naming %q", err, want)
		}
	}
	if _, err := renderWith(t, renderOpts{install: true}, defaults, write("redis: {addrs: [\"redis.data:6379\"], tls: true, insecure: true}\n")); err == nil || !strings.Contains(err.Error(), "set only one of redis.tls and redis.insecure") {
		t.Errorf("redis.tls and redis.insecure together: %v", err)
	}
	for _, ok := range []string{
		"redis: {addrs: [\"redis.data:6379\"], tls: true}\n",
		"redis: {addrs: [\"redis.data:6379\"], tls: {serverName: redis.data.svc}}\n",
		"redis: {addrs: [\"127.0.0.1:6379\", \"localhost:6380\"]}\n",
	} {
		objs, err := renderWith(t, renderOpts{install: true}, defaults, write(ok))
		if err != nil {
			t.Errorf("%q: %v", ok, err)
			continue
		}
		checkWorkloads(t, objs)
		if strings.Contains(configText(objs), "insecure_plaintext_remotes") {
			t.Errorf("%q: spool.yaml allows plaintext remotes", ok)
		}
	}
	f := write("redis: {addrs: [\"redis.data:6379\"], insecure: true}\n")
	objs, err := renderWith(t, renderOpts{install: true}, defaults, f)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, objs) // spoold accepts it
	if text := configText(objs); !strings.Contains(text, "insecure_plaintext_remotes: true") {
		t.Errorf("spool.yaml with redis.insecure:\n%s", text)
	}
	notes, err := renderNotes(t, defaults, f)
	if err != nil || !strings.Contains(notes, "WARNING: redis.insecure") {
		t.Errorf("NOTES.txt does not warn about redis.insecure (%v):\n%s", err, notes)
	}
}
