package check

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/spoolmq/spool/sidecar/config"
)

// The files spoold reads for peer security, where the chart and the
// manifests mount them.
const (
	peerTLSDir     = "/etc/spool-tls"
	joinSecretPath = "/etc/spool-join/secret"
)

// checkPeerSecurity: a pod of a cluster (storage on or off) runs its peer
// connections over mutual TLS, or says cluster.insecure; every file of
// cluster.tls and cluster.join_secret_file comes from a Secret the
// container mounts, under the key the Secret's writer uses (tls.crt,
// tls.key, ca.crt from cert-manager; "secret"). Storage nodes present a
// join secret. spoold itself checks less for storage-off nodes, which
// would fail only when they first dial a member.
func checkPeerSecurity(spec *corev1.PodSpec, c *corev1.Container, cfg *config.Config) error {
	cl := cfg.Cluster
	if !cl.Enabled() {
		return nil
	}
	if cl.TLS.CertFile == "" && !cl.Insecure {
		return fmt.Errorf("a cluster node without cluster.tls and without cluster.insecure: its peers would take any connection to port 7072 for a node")
	}
	if cl.TLS.CertFile != "" && cl.Insecure {
		return fmt.Errorf("cluster.tls and cluster.insecure together: say one")
	}
	for file, key := range map[string]string{cl.TLS.CertFile: "tls.crt", cl.TLS.KeyFile: "tls.key", cl.TLS.CAFile: "ca.crt", cl.JoinSecretFile: "secret"} {
		if file == "" {
			continue
		}
		if _, _, ok := csiFileAt(spec, c, file); ok && key != "secret" {
			continue // cert-manager's csi-driver writes the pod's own (perpod_test.go)
		}
		secret, got, ok := secretKeyAt(spec, c, file)
		if !ok {
			return fmt.Errorf("spoold reads %s, which is in no Secret volume the container mounts", file)
		}
		if got != key {
			return fmt.Errorf("spoold reads %s from key %q of Secret %s, want key %q", file, got, secret, key)
		}
	}
	if cl.Storage == config.StorageOn && cl.JoinSecretFile == "" {
		return fmt.Errorf("a storage node without cluster.join_secret_file: anything that reaches the peer port with a certificate the CA signed could join the cluster")
	}
	return nil
}

// secretKeyAt finds the Secret and key a container sees at path.
func secretKeyAt(spec *corev1.PodSpec, c *corev1.Container, path string) (secret, key string, ok bool) {
	for _, m := range c.VolumeMounts {
		dir := filepath.Clean(m.MountPath)
		if filepath.Dir(path) != dir {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			base := filepath.Base(path)
			if len(v.Secret.Items) == 0 {
				return v.Secret.SecretName, base, true
			}
			for _, it := range v.Secret.Items {
				if it.Path == base {
					return v.Secret.SecretName, it.Key, true
				}
			}
		}
	}
	return "", "", false
}

// A cluster with neither TLS nor the explicit opt-out does not render, and
// the message names the three ways to say how the nodes authenticate each
// other; two of them at once are refused too.
func TestChartRefusesClusterWithoutPeerTLS(t *testing.T) {
	_, err := render(t, "", true)
	for _, want := range []string{"cluster.tls.certManager.issuerRef", "cluster.tls.secretName", "cluster.insecure: true", "Peer TLS and the join secret"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the defaults alone: %v; want a failure naming %q", err, want)
		}
	}
	for _, c := range []struct{ values, says string }{
		{"mode: deployment\ncluster: {storage: \"on\"}", "cluster.insecure: true"},
		{"mode: deployment\ncluster: {storage: \"off\", join: [\"a:7072\"]}", "cluster.insecure: true"},
		{"cluster: {insecure: true, tls: {secretName: x}}", "set only one of"},
		{"cluster: {tls: {secretName: x, certManager: {issuerRef: {name: ca}}}}", "set only one of"},
		{"cluster: {insecure: true, tls: {peerURIPrefix: \"spiffe://cluster.local/spool/\"}}", "peerURIPrefix with cluster.insecure"},
		{"cluster: {tls: {secretName: x, peerURIPrefix: \"https://x/\"}}", "must be a spiffe:// URI"},
		{"mode: deployment\ncluster: {storage: \"off\", join: [\"a:7072\"], tls: {certManager: {issuerRef: {name: ca}}}}", "set cluster.tls.secretName to the storage nodes' Secret"},
	} {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := writeFile(f, c.values); err != nil {
			t.Fatal(err)
		}
		if _, err := render(t, f, true); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v; want a failure saying %q", c.values, err, c.says)
		}
	}
	// Without a cluster there are no peers: nothing to choose.
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := writeFile(f, "mode: deployment\ncluster: {enabled: false}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := render(t, f, true); err != nil {
		t.Errorf("cluster.enabled false: %v", err)
	}
}

// certificates returns the cert-manager Certificates among objs.
func certificates(objs []object) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if m, ok := o.obj.(map[string]any); ok && o.kind == "Certificate" {
			out = append(out, m)
		}
	}
	return out
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// With cluster.tls.certManager the chart asks cert-manager for the nodes'
// certificate: the release's spiffe:// URI SAN, usable as server and as
// client, from the issuer named; every pod mounts its Secret read-only
// and spoold's configuration names its three files.
func TestChartCertManagerCertificate(t *testing.T) {
	for _, install := range []bool{true, false} {
		objs, err := render(t, filepath.Join(chartDir, "examples", "statefulset.yaml"), install)
		if err != nil {
			t.Fatal(err)
		}
		certs := certificates(objs)
		if len(certs) != 1 {
			t.Fatalf("install=%v: %d Certificates rendered, want 1", install, len(certs))
		}
		spec, _ := certs[0]["spec"].(map[string]any)
		if got := strs(spec["uris"]); !slices.Equal(got, []string{"spiffe://cluster.local/ns/shop/spool/orders"}) {
			t.Errorf("uris %q: want the release's identity spiffe://cluster.local/ns/shop/spool/orders", got)
		}
		usages := strs(spec["usages"])
		for _, u := range []string{"server auth", "client auth", "digital signature", "key encipherment"} {
			if !slices.Contains(usages, u) {
				t.Errorf("usages %q lack %q: a node is the server of the peers that dial it and the client of those it dials", usages, u)
			}
		}
		if ref := fmt.Sprint(spec["issuerRef"]); ref != "map[group:cert-manager.io kind:Issuer name:spool-ca]" {
			t.Errorf("issuerRef %s, want the example's Issuer spool-ca", ref)
		}
		if spec["duration"] != "2160h" || spec["renewBefore"] != "360h" {
			t.Errorf("duration %v renewBefore %v, want the defaults 2160h and 360h", spec["duration"], spec["renewBefore"])
		}
		secret := fmt.Sprint(spec["secretName"])
		if secret != "orders-spool-peer-tls" {
			t.Errorf("secretName %s, want orders-spool-peer-tls (derived from the release)", secret)
		}
		cms := configMaps(objs)
		for _, o := range objs {
			tmpl, ok := podsOf([]object{o})[o.source]
			if !ok {
				continue
			}
			if !slices.ContainsFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == secret }) {
				t.Errorf("%s: no volume of the Secret %s", o.source, secret)
			}
			for i := range 3 {
				cfg, err := resolveSpoold(t, &tmpl.Spec, cms, fmt.Sprintf("orders-spool-%d", i), i)
				if err != nil {
					t.Fatal(err)
				}
				tls := cfg.Cluster.TLS
				if tls.CertFile != peerTLSDir+"/tls.crt" || tls.KeyFile != peerTLSDir+"/tls.key" || tls.CAFile != peerTLSDir+"/ca.crt" || tls.PeerURIPrefix != "" || cfg.Cluster.Insecure {
					t.Errorf("pod %d: cluster.tls %+v insecure %v: want the Secret's three files, no peer_uri_prefix (the node's own identity)", i, tls, cfg.Cluster.Insecure)
				}
				if s, _, _ := secretKeyAt(&tmpl.Spec, spooldContainer(&tmpl.Spec), tls.CertFile); s != secret {
					t.Errorf("pod %d: spoold reads its certificate from Secret %q, not %s", i, s, secret)
				}
			}
		}
	}
	// The trust domain and a prefix of per-node identities reach the
	// Certificate and spoold.
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := writeFile(f, "cluster:\n  tls:\n    trustDomain: prod.example.com\n    peerURIPrefix: \"spiffe://prod.example.com/ns/shop/spool/\"\n    certManager:\n      issuerRef: {name: spool-ca, kind: ClusterIssuer}\n      duration: 720h\n      renewBefore: 240h\n"); err != nil {
		t.Fatal(err)
	}
	objs, err := render(t, f, true)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, objs)
	spec, _ := certificates(objs)[0]["spec"].(map[string]any)
	if got := strs(spec["uris"]); !slices.Equal(got, []string{"spiffe://prod.example.com/ns/shop/spool/orders"}) || spec["duration"] != "720h" || spec["renewBefore"] != "240h" {
		t.Errorf("uris %q duration %v renewBefore %v", got, spec["duration"], spec["renewBefore"])
	}
	if !strings.Contains(configText(objs), "peer_uri_prefix: spiffe://prod.example.com/ns/shop/spool/") {
		t.Errorf("peerURIPrefix did not reach spool.yaml:\n%s", configText(objs))
	}
}

func configMaps(objs []object) map[string]*corev1.ConfigMap {
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok {
			cms[cm.Name] = cm
		}
	}
	return cms
}

func configText(objs []object) string {
	var text string
	for _, cm := range configMaps(objs) {
		for _, v := range cm.Data {
			text += v
		}
	}
	return strings.ReplaceAll(text, "'", "")
}

// joinSecretOf returns the Secret named name among objs and the file its
// key "secret" becomes.
func joinSecretOf(t *testing.T, objs []object, name string) (*corev1.Secret, string) {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.obj.(*corev1.Secret); ok && s.Name == name {
			// The strict decode into corev1.Secret has already base64-decoded data.
			return s, string(s.Data["secret"])
		}
	}
	return nil, ""
}

// fakeCluster is a ClientProvider whose API server holds objs.
type fakeCluster struct {
	client *dynamicfake.FakeDynamicClient
}

func (f fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, err
	}
	return f.client.Resource(gv.WithResource(strings.ToLower(kind) + "s")), true, nil
}

// Storage nodes get a join secret: without a value the chart makes a
// Secret of 32 random bytes (base64 text) on install, reads it back on an
// upgrade (a new one would lock the running nodes out of each other's
// joins), keeps it after an uninstall; every pod mounts it read-only and
// spoold's configuration names it. A Secret named in the values is used
// instead, and the chart makes none.
func TestChartJoinSecret(t *testing.T) {
	defaults := defaultsFile(t)
	const name = "orders-spool-join-secret"
	first, err := render(t, defaults, true)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, first)
	s, text := joinSecretOf(t, first, name)
	if s == nil {
		t.Fatalf("no Secret %s rendered", name)
	}
	if raw, err := base64.StdEncoding.DecodeString(text); err != nil || len(raw) != 32 {
		t.Errorf("the join secret %q is not the base64 of 32 bytes (%d, %v)", text, len(raw), err)
	}
	if _, err := config.ReadJoinSecret(writeTemp(t, text)); err != nil {
		t.Errorf("spoold refuses the join secret file: %v", err)
	}
	if s.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("annotations %v: want helm.sh/resource-policy keep (the volumes, and their cluster, outlive an uninstall)", s.Annotations)
	}
	again, _ := render(t, defaults, true)
	if _, text2 := joinSecretOf(t, again, name); text2 == text {
		t.Error("two renders without a cluster made the same join secret: it is not random")
	}
	// An upgrade finds the Secret and keeps its value.
	existing := &corev1.Secret{Data: map[string][]byte{"secret": []byte("kept-join-secret-0123456789")}}
	existing.APIVersion, existing.Kind = "v1", "Secret"
	existing.Name, existing.Namespace = name, "shop"
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(existing)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), &unstructured.Unstructured{Object: u})
	up, err := renderWith(t, renderOpts{install: false, cluster: fakeCluster{client}}, defaults)
	if err != nil {
		t.Fatal(err)
	}
	if _, got := joinSecretOf(t, up, name); got != "kept-join-secret-0123456789" {
		t.Errorf("upgrade: join secret %q, want the existing Secret's value kept", got)
	}
	for _, tmpl := range podsOf(first) {
		cfg, err := resolveSpoold(t, &tmpl.Spec, configMaps(first), "orders-spool-1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Cluster.JoinSecretFile != joinSecretPath {
			t.Errorf("cluster.join_secret_file %q, want %s", cfg.Cluster.JoinSecretFile, joinSecretPath)
		}
		if sec, key, _ := secretKeyAt(&tmpl.Spec, spooldContainer(&tmpl.Spec), cfg.Cluster.JoinSecretFile); sec != name || key != "secret" {
			t.Errorf("spoold reads the join secret from Secret %q key %q, want %s key secret", sec, key, name)
		}
	}
	// A Secret of the user's: used, none made.
	f := filepath.Join(t.TempDir(), "own.yaml")
	if err := writeFile(f, "cluster: {joinSecret: {secretName: shop-join}}\n"); err != nil {
		t.Fatal(err)
	}
	own, err := renderWith(t, renderOpts{install: true}, defaults, f)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, own)
	for _, o := range own {
		if o.kind == "Secret" {
			t.Errorf("cluster.joinSecret.secretName set, yet the chart makes %s", o.source)
		}
	}
	for _, tmpl := range podsOf(own) {
		if sec, _, _ := secretKeyAt(&tmpl.Spec, spooldContainer(&tmpl.Spec), joinSecretPath); sec != "shop-join" {
			t.Errorf("the join secret comes from %q, want shop-join", sec)
		}
	}
}

func writeTemp(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := writeFile(p, s); err != nil {
		t.Fatal(err)
	}
	return p
}

// The storage-off example uses the cluster of the storage-nodes example
// (installed as release spool-storage): it mounts the Secrets that release
// makes, its peer certificate and its join secret, and no Secret of its own.
func TestChartStorageOffUsesTheStorageNodesSecrets(t *testing.T) {
	nodes, err := renderWith(t, renderOpts{release: "spool-storage", install: true}, filepath.Join(chartDir, "examples", "storage-nodes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, c := range certificates(nodes) {
		spec, _ := c["spec"].(map[string]any)
		made[fmt.Sprint(spec["secretName"])] = true
	}
	for _, o := range nodes {
		if o.kind == "Secret" {
			made[o.name] = true
		}
	}
	off, err := render(t, filepath.Join(chartDir, "examples", "deployment-storage-off.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range off {
		if o.kind == "Secret" || o.kind == "Certificate" {
			t.Errorf("storage-off sidecars make %s: they use the storage nodes' credentials", o.source)
		}
	}
	for where, tmpl := range podsOf(off) {
		cfg, err := resolveSpoold(t, &tmpl.Spec, configMaps(off), "orders-spool-7d9f8c6b5d-x2x9q", 0)
		if err != nil {
			t.Fatal(err)
		}
		c := spooldContainer(&tmpl.Spec)
		for _, f := range []string{cfg.Cluster.TLS.CertFile, cfg.Cluster.JoinSecretFile} {
			sec, _, ok := secretKeyAt(&tmpl.Spec, c, f)
			if !ok || !made[sec] {
				t.Errorf("%s: spoold reads %q from Secret %q, which release spool-storage does not make (it makes %v)", where, f, sec, made)
			}
		}
	}
}

// cluster.insecure, the explicit opt-out: spoold is told so, no
// certificate is asked for or mounted, the join secret still is, and the
// release notes say it loudly.
func TestChartInsecureCluster(t *testing.T) {
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := writeFile(f, "cluster: {insecure: true}\n"); err != nil {
		t.Fatal(err)
	}
	objs, err := render(t, f, true)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, objs)
	if len(certificates(objs)) != 0 {
		t.Error("cluster.insecure still asks for a Certificate")
	}
	text := configText(objs)
	if !strings.Contains(text, "insecure: true") || strings.Contains(text, "cert_file") || !strings.Contains(text, "join_secret_file: "+joinSecretPath) {
		t.Errorf("spool.yaml with cluster.insecure:\n%s", text)
	}
	notes, err := renderNotes(t, f)
	if err != nil || !strings.Contains(notes, "WARNING: cluster.insecure") {
		t.Errorf("NOTES.txt does not warn about cluster.insecure (%v):\n%s", err, notes)
	}
}

// The plain manifests' cluster pods mount the Secret peer-certificate.yaml
// asks cert-manager for, a certificate with a spiffe:// URI SAN usable as
// server and client, signed by a CA issuer (a renewal chains to the same
// ca.crt); and the join secret every cluster manifest tells how to make.
func TestManifestsPeerCertificate(t *testing.T) {
	objs := readManifests(t, "../kubernetes/*.yaml")
	var peer map[string]any
	for _, c := range certificates(objs) {
		if spec, _ := c["spec"].(map[string]any); spec["isCA"] != true {
			if peer != nil {
				t.Fatal("more than one peer Certificate among the manifests")
			}
			peer = spec
		}
	}
	if peer == nil {
		t.Fatal("no peer Certificate among the manifests (peer-certificate.yaml)")
	}
	secret := fmt.Sprint(peer["secretName"])
	uris := strs(peer["uris"])
	if secret != "spool-peer-tls" || len(uris) != 1 || !strings.HasPrefix(uris[0], "spiffe://") {
		t.Errorf("peer Certificate: secretName %s uris %q, want spool-peer-tls with one spiffe:// URI SAN", secret, uris)
	}
	usages := strs(peer["usages"])
	if !slices.Contains(usages, "server auth") || !slices.Contains(usages, "client auth") {
		t.Errorf("peer Certificate usages %q: want server auth and client auth", usages)
	}
	if ref, _ := peer["issuerRef"].(map[string]any); ref["name"] != "spool-ca" {
		t.Errorf("peer Certificate issuerRef %v: want the CA issuer spool-ca", ref)
	}
	clustered := 0
	for where, tmpl := range podsOf(objs) {
		c := spooldContainer(&tmpl.Spec)
		if c == nil {
			continue
		}
		tlsSecret, _, tlsOK := secretKeyAt(&tmpl.Spec, c, peerTLSDir+"/tls.crt")
		joinSecret, _, joinOK := secretKeyAt(&tmpl.Spec, c, joinSecretPath)
		if !tlsOK && !joinOK {
			continue // a single node
		}
		clustered++
		if tlsSecret != secret || joinSecret != "spool-join-secret" {
			t.Errorf("%s: mounts Secrets %q and %q, want %s and spool-join-secret", where, tlsSecret, joinSecret, secret)
		}
	}
	if clustered != 3 {
		t.Errorf("%d cluster workloads mount the peer Secrets, want 3 (statefulset, deployment-storage, deployment-storage-off)", clustered)
	}
}
