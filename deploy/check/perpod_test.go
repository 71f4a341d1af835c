package check

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/spoolmq/spool/engine/cluster/peerauth"
)

// The cert-manager csi-driver and the attributes the chart sets on its
// volumes (csi.cert-manager.io/...).
const (
	csiDriver = "csi.cert-manager.io"
	csiAttr   = "csi.cert-manager.io/"
)

// csiFileAt is the file of a cert-manager csi-driver volume that a
// container sees at path: the attribute that names it (certificate-file,
// privatekey-file or ca-file) and the volume; ok false when path is in no
// such volume.
func csiFileAt(spec *corev1.PodSpec, c *corev1.Container, path string) (attr string, v *corev1.Volume, ok bool) {
	for _, m := range c.VolumeMounts {
		if filepath.Dir(path) != filepath.Clean(m.MountPath) {
			continue
		}
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			if v.Name != m.Name || v.CSI == nil || v.CSI.Driver != csiDriver {
				continue
			}
			for _, a := range []string{"certificate-file", "privatekey-file", "ca-file"} {
				if v.CSI.VolumeAttributes[csiAttr+a] == filepath.Base(path) {
					return a, v, true
				}
			}
		}
	}
	return "", nil, false
}

// With cluster.tls.certManager.perPod every pod gets a certificate of its
// own from cert-manager's csi-driver, naming the pod under the release's
// identity; spoold's peer_uri_prefix is that identity and "/", so each pod's
// identity is a peer's and differs from every other pod's (each node is
// bound to its own when it joins: docs/security.md, "Peers"). No
// Certificate or Secret; the pods stay "restricted"; without an issuer
// the chart refuses.
func TestChartPerPodPeerCertificates(t *testing.T) {
	perPod := filepath.Join(t.TempDir(), "per-pod.yaml")
	if err := writeFile(perPod, "cluster: {tls: {certManager: {perPod: true}}}\n"); err != nil {
		t.Fatal(err)
	}
	objs, err := renderWith(t, renderOpts{install: true}, filepath.Join(chartDir, "examples", "statefulset.yaml"), perPod)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(certificates(objs)); n != 0 {
		t.Errorf("%d Certificates rendered: the csi-driver issues each pod's", n)
	}
	const release = "spiffe://cluster.local/ns/shop/spool/orders"
	cms := configMaps(objs)
	pods := podsOf(objs)
	if len(pods) != 1 {
		t.Fatalf("%d pod templates, want the StatefulSet's", len(pods))
	}
	for where, tmpl := range pods {
		restricted(t, where, tmpl)
		spec := &tmpl.Spec
		c := spooldContainer(spec)
		identities := map[string]bool{}
		for i := range 3 {
			pod := fmt.Sprintf("orders-spool-%d", i)
			cfg, err := resolveSpoold(t, spec, cms, pod, i)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkPeerSecurity(spec, c, cfg); err != nil {
				t.Errorf("%s: %v", pod, err)
			}
			tls := cfg.Cluster.TLS
			if tls.PeerURIPrefix != release+"/" {
				t.Errorf("%s: peer_uri_prefix %q, want %q", pod, tls.PeerURIPrefix, release+"/")
			}
			attr, v, ok := csiFileAt(spec, c, tls.CertFile)
			if !ok || attr != "certificate-file" {
				t.Fatalf("%s: spoold's certificate %s is no certificate-file of a %s volume", pod, tls.CertFile, csiDriver)
			}
			if a, _, _ := csiFileAt(spec, c, tls.KeyFile); a != "privatekey-file" {
				t.Errorf("%s: spoold's key %s is %q of the volume, want privatekey-file", pod, tls.KeyFile, a)
			}
			if a, _, _ := csiFileAt(spec, c, tls.CAFile); a != "ca-file" {
				t.Errorf("%s: spoold's CA %s is %q of the volume, want ca-file", pod, tls.CAFile, a)
			}
			at := v.CSI.VolumeAttributes
			for k, want := range map[string]string{
				"issuer-name": "spool-ca", "issuer-kind": "Issuer", "issuer-group": "cert-manager.io",
				"duration": "2160h", "renew-before": "360h",
				"fs-group": fmt.Sprint(*tmpl.Spec.SecurityContext.FSGroup), // spoold runs as it, not as root
			} {
				if at[csiAttr+k] != want {
					t.Errorf("%s: %s%s = %q, want %q", pod, csiAttr, k, at[csiAttr+k], want)
				}
			}
			usages := strings.Split(at[csiAttr+"key-usages"], ",")
			for _, u := range []string{"server auth", "client auth"} {
				if !strings.Contains(","+strings.Join(usages, ",")+",", ","+u+",") {
					t.Errorf("%s: key-usages %q lack %q: a node is the server of the peers that dial it and the client of those it dials", pod, usages, u)
				}
			}
			// The identity the driver writes into this pod's certificate.
			id := strings.ReplaceAll(at[csiAttr+"uri-sans"], "${POD_NAME}", pod)
			u, err := url.Parse(id)
			if err != nil {
				t.Fatalf("%s: uri-sans %q: %v", pod, id, err)
			}
			leaf := &x509.Certificate{URIs: []*url.URL{u}}
			p, err := peerauth.PolicyFor(leaf, tls.PeerURIPrefix)
			if err != nil {
				t.Fatalf("%s: spoold would refuse its own certificate (%s): %v", pod, id, err)
			}
			if got, err := p.Identity(leaf); err != nil || got != release+"/"+pod {
				t.Errorf("%s: identity %q, %v; want %s/%s", pod, got, err, release, pod)
			}
			identities[id] = true
		}
		if len(identities) != 3 {
			t.Errorf("%s: the three pods' identities %v are not three", where, identities)
		}
	}

	notes, err := renderNotes(t, filepath.Join(chartDir, "examples", "statefulset.yaml"), perPod)
	if err != nil || !strings.Contains(notes, "a certificate per pod from cert-manager's csi-driver") || strings.Contains(notes, "Peer TLS: Secret") {
		t.Errorf("notes (%v) do not say where the pods' certificates come from:\n%s", err, notes)
	}

	noIssuer := filepath.Join(t.TempDir(), "no-issuer.yaml")
	if err := writeFile(noIssuer, "cluster: {insecure: true, tls: {certManager: {perPod: true}}}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := render(t, noIssuer, true); err == nil || !strings.Contains(err.Error(), "perPod needs cluster.tls.certManager.issuerRef") {
		t.Errorf("perPod without an issuer: %v; want a failure naming the issuer", err)
	}
}
