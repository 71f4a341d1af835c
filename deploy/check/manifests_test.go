package check

import (
	"os"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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
