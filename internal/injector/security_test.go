package injector

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The sidecar the injector adds meets the "restricted" Pod Security
// Standard on its own (seccomp RuntimeDefault, non-root, no privilege
// escalation, no capabilities, read-only root), and mounts no service
// account token: spoold never calls the Kubernetes API. The app's own
// token mount, added by the API server before the webhook runs, and the
// pod's automountServiceAccountToken are the app's and stay as they were.
func TestInjectedSidecarIsRestrictedWithoutToken(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	token := corev1.VolumeMount{Name: "kube-api-access-x1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "example/app:1", VolumeMounts: []corev1.VolumeMount{token}}},
			Volumes: []corev1.Volume{{Name: token.Name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
		},
	}
	pod.Name = "app-0"
	pod.Annotations = map[string]string{"spool.dev/inject": "true"}
	res, err := Inject(pod, d)
	if err != nil || len(res.Patch) == 0 {
		t.Fatalf("Inject: %v, %d ops", err, len(res.Patch))
	}
	raw, _ := json.Marshal(pod)
	patch, _ := json.Marshal(res.Patch)
	got := decodePodStrict(t, applyPatch(t, raw, patch))
	i := slices.IndexFunc(got.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == ContainerName })
	if i < 0 {
		t.Fatal("no spoold container injected")
	}
	c := got.Spec.InitContainers[i]
	sc := c.SecurityContext
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("spoold's securityContext %+v: want seccomp RuntimeDefault, runAsNonRoot, no escalation, read-only root, drop ALL", sc)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == token.Name || m.MountPath == token.MountPath {
			t.Errorf("spoold mounts the service account token (%+v)", m)
		}
	}
	if got.Spec.AutomountServiceAccountToken != nil {
		t.Errorf("the pod's automountServiceAccountToken changed to %v: it is the app's", *got.Spec.AutomountServiceAccountToken)
	}
	if !slices.ContainsFunc(got.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == token.Name && m.MountPath == token.MountPath }) {
		t.Errorf("the app's token mount is gone: %+v", got.Spec.Containers[0].VolumeMounts)
	}
}
