package check

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spoolmq/spool/internal/injector"
)

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// The example manifests decode strictly, their pods are coherent and
// spoold accepts the configuration of every pod.
func TestExampleManifests(t *testing.T) {
	checkWorkloads(t, readManifests(t, "../kubernetes/*.yaml"))
}

// The injector's manifests decode strictly, its defaults are ones it
// accepts, and its webhook calls the path and port its Service serves.
func TestInjectorManifests(t *testing.T) {
	objs := readManifests(t, "../injector/*.yaml")
	var hook *admissionregistrationv1.MutatingWebhookConfiguration
	var svc *corev1.Service
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.ConfigMap:
			if _, err := injector.ParseDefaults([]byte(v.Data["defaults.yaml"])); err != nil {
				t.Errorf("%s: %v", o.source, err)
			}
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			hook = v
		case *corev1.Service:
			svc = v
		case *appsv1.Deployment:
			if err := checkPod(&v.Spec.Template.Spec, nil); err != nil {
				t.Errorf("%s: %v", o.source, err)
			}
		}
	}
	if hook == nil || svc == nil || len(hook.Webhooks) != 1 {
		t.Fatal("want one MutatingWebhookConfiguration with one webhook and a Service")
	}
	ref := hook.Webhooks[0].ClientConfig.Service
	if ref == nil || ref.Name != svc.Name || ref.Namespace != svc.Namespace || ref.Path == nil || *ref.Path != "/mutate" || ref.Port == nil || *ref.Port != svc.Spec.Ports[0].Port {
		t.Errorf("the webhook calls %+v, but the Service is %s/%s port %d and the injector serves /mutate", ref, svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
	}
}

// The shipped injector answers only the API server: its Deployment gives
// spool-injector --client-ca-file, mounted from a Secret, and --client-names,
// and certificate.yaml has cert-manager make that CA and, signed by it, a
// client certificate of one of those names for the API server to present;
// or, where the control plane cannot present one, a NetworkPolicy limits
// who reaches the injector's pods. Without either, anyone who reaches its
// Service reads the defaults in its patches and holds its review slots.
func TestInjectorAuthenticatesTheAPIServer(t *testing.T) {
	objs := readManifests(t, "../injector/*.yaml")
	var dep *appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.obj.(*appsv1.Deployment); ok && d.Name == "spool-injector" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment spool-injector in deploy/injector")
	}
	for _, o := range objs {
		np, ok := o.obj.(*networkingv1.NetworkPolicy)
		if !ok || np.Namespace != dep.Namespace || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		open := slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool { return len(r.From) == 0 })
		if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil && !sel.Empty() && sel.Matches(labelSet(dep.Spec.Template.Labels)) && !open {
			return // the network admits only the sources it names (the control plane's)
		}
	}
	spec := &dep.Spec.Template.Spec
	c := spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	caFile, names := flags["--client-ca-file"], strings.Split(flags["--client-names"], ",")
	if caFile == "" || names[0] == "" {
		t.Fatalf("spool-injector runs without --client-ca-file and --client-names (args %q) and no NetworkPolicy selects its pods: anyone who reaches its Service gets answers", c.Args)
	}
	secret, key, ok := secretKeyAt(spec, &c, caFile)
	if !ok {
		t.Fatalf("--client-ca-file %s is not a file of a Secret the container mounts", caFile)
	}
	// certificate.yaml: the CA (a Certificate with isCA into that Secret),
	// an Issuer of it, and a client certificate of that Issuer.
	issuers := map[string]string{} // Issuer name → its CA's Secret
	for _, o := range objs {
		if m, ok := o.obj.(map[string]any); ok && o.kind == "Issuer" {
			if ca, ok := m["spec"].(map[string]any)["ca"].(map[string]any); ok {
				issuers[o.name] = fmt.Sprint(ca["secretName"])
			}
		}
	}
	var ca, client bool
	for _, cert := range certificates(objs) {
		spec, _ := cert["spec"].(map[string]any)
		ref, _ := spec["issuerRef"].(map[string]any)
		switch {
		case spec["secretName"] == secret && spec["isCA"] == true:
			ca = key == "ca.crt" || key == "tls.crt"
		case issuers[fmt.Sprint(ref["name"])] == secret && slices.Contains(names, fmt.Sprint(spec["commonName"])):
			client = slices.Equal(strs(spec["usages"]), []string{"client auth"})
		}
	}
	if !ca || !client {
		t.Errorf("certificate.yaml: CA Certificate into Secret %s (key %s) %v, a client-auth Certificate named one of %q from an Issuer of it %v: want both", secret, key, ca, names, client)
	}
}
