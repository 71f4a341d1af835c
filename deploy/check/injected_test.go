package check

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/spoolmq/spool/internal/injector"
)

// shippedDefaults are the injector's defaults as deploy/injector ships them.
func shippedDefaults(t *testing.T) injector.Defaults {
	t.Helper()
	for _, o := range readManifests(t, "../injector/*.yaml") {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && cm.Name == "spool-injector" {
			d, err := injector.ParseDefaults([]byte(cm.Data["defaults.yaml"]))
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatal("no ConfigMap spool-injector in deploy/injector")
	return injector.Defaults{}
}

// restrictedVerdict evaluates a pod at the "restricted" Pod Security
// Standard, latest version, with Kubernetes' own checks.
func restrictedVerdict(pod *corev1.Pod) policy.AggregateCheckResult {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return policy.AggregateCheckResults(ev.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
}

// A pod that meets the "restricted" Pod Security Standard still meets it
// once the injector has added spoold: the injector's own Inject, with the
// shipped defaults, its JSONPatch applied by the JSON Patch implementation
// the API server uses, the result judged by the PodSecurity admission
// controller's checks. Whether the app's restrictions sit on the pod or on
// each container, spoold must bring its own.
func TestInjectedPodSecurity(t *testing.T) {
	d := shippedDefaults(t)
	yes, no := true, false
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	appContext := &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	uid := int64(1000)
	pods := map[string]*corev1.Pod{
		"pod-level context": {Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: runtimeDefault},
			Containers:      []corev1.Container{{Name: "app", Image: "example/app:1", SecurityContext: appContext}},
		}},
		"pod-level user": {Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, SeccompProfile: runtimeDefault},
			Containers:      []corev1.Container{{Name: "app", Image: "example/app:1", SecurityContext: appContext}},
		}},
		"container-level contexts only": {Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "example/app:1", SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: &yes, SeccompProfile: runtimeDefault, AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}}},
		}},
		"cluster secrets and a config map": {
			ObjectMeta: podMeta(map[string]string{
				injector.AnnotationClusterTLSSecret:  "orders-spool-peer-tls",
				injector.AnnotationClusterJoinSecret: "orders-spool-join-secret",
				injector.AnnotationConfig:            "orders-spool",
			}),
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: runtimeDefault},
				Containers:      []corev1.Container{{Name: "app", Image: "example/app:1", SecurityContext: appContext}},
			},
		},
	}
	for name, pod := range pods {
		t.Run(name, func(t *testing.T) {
			if pod.Annotations == nil {
				pod.ObjectMeta = podMeta(nil)
			}
			if v := restrictedVerdict(pod); !v.Allowed {
				t.Fatalf("the app's pod itself is not restricted: %s", v.ForbiddenDetail())
			}
			res, err := injector.Inject(pod, d)
			if err != nil || len(res.Patch) == 0 {
				t.Fatalf("Inject: %v, %d operations", err, len(res.Patch))
			}
			got := patched(t, pod, res.Patch)
			if len(got.Spec.InitContainers) == 0 || got.Spec.InitContainers[0].Name != injector.ContainerName {
				t.Fatalf("no spoold in the patched pod's init containers: %+v", got.Spec.InitContainers)
			}
			if v := restrictedVerdict(got); !v.Allowed {
				t.Errorf("injecting spoold made the pod fail the restricted standard: %s", v.ForbiddenDetail())
			}
			// spoold names its user, whatever the app's image says of its own.
			spoold := got.Spec
			spoold.InitContainers, spoold.Containers = spoold.InitContainers[:1], nil
			runAsUserSet(t, name, &corev1.PodTemplateSpec{Spec: spoold})
		})
	}
}

// podMeta is an app pod's metadata asking for the sidecar, with ann.
func podMeta(ann map[string]string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: "orders-0", Namespace: "shop", Annotations: map[string]string{injector.AnnotationInject: "true"}}
	maps.Copy(m.Annotations, ann)
	return m
}

// patched applies the injector's JSONPatch to pod as the API server does.
func patched(t *testing.T, pod *corev1.Pod, ops []injector.PatchOp) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("the patch does not decode: %v", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("the patch does not apply: %v", err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(fmt.Errorf("the patched pod: %w", err))
	}
	return &got
}
