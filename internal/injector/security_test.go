package injector

import (
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/spoolmq/spool/sidecar/config"
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
	// A numeric user: the image's USER alone would do only if numeric (the
	// kubelet cannot check a name against runAsNonRoot).
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != RunAsUser || sc.RunAsGroup == nil || *sc.RunAsGroup != RunAsUser {
		t.Errorf("spoold's securityContext %+v: want runAsUser and runAsGroup %d", sc, RunAsUser)
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

// A pod that names its own user keeps it for spoold too: the app connects
// to spoold's socket, whose mode (apps.socket_mode, 0600) lets in only
// spoold's user, so both run as the pod's.
func TestInjectedSidecarRunsAsThePodsUser(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, yes := int64(1000), int64(3000), true
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &yes},
		Containers:      []corev1.Container{{Name: "app", Image: "example/app:1"}},
	}}
	pod.Name = "app-0"
	pod.Annotations = map[string]string{AnnotationInject: "true"}
	res, err := Inject(pod, d)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(pod)
	patch, _ := json.Marshal(res.Patch)
	got := decodePodStrict(t, applyPatch(t, raw, patch))
	sc := got.Spec.InitContainers[slices.IndexFunc(got.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == ContainerName })].SecurityContext
	if sc.RunAsUser != nil || sc.RunAsGroup != nil {
		t.Errorf("spoold's runAsUser %v, runAsGroup %v: want the pod's (%d:%d), which the app shares", sc.RunAsUser, sc.RunAsGroup, uid, gid)
	}
}

// What a pod's author may change is an allow-list: the image, the Redis
// addresses (where the operator's Redis password Secret goes) and the
// cluster to join (where the sidecar's credentials go) are the operator's,
// from the defaults file; a pod outside trusted_namespaces that sets one is
// refused, naming it. Topics, subscriptions, the config file, the drain
// timeout and resources are the pod's own.
func TestRestrictedAnnotationsNeedATrustedNamespace(t *testing.T) {
	d, err := ParseDefaults([]byte(strings.Replace(testDefaults, "[shop]", "[spool-ops]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	restricted := map[string]string{
		AnnotationImage:       "attacker.example/spoold:latest",
		AnnotationRedisAddrs:  "redis.attacker.example:6379",
		AnnotationClusterJoin: "peers.attacker.example:7072",
	}
	for ann, v := range restricted {
		for _, ns := range []string{"web", "spool-ops"} {
			pod := &corev1.Pod{}
			pod.Namespace = ns
			pod.Annotations = map[string]string{AnnotationInject: "true", ann: v}
			res, err := Inject(pod, d)
			if ns == "spool-ops" {
				if err != nil || len(res.Patch) == 0 {
					t.Errorf("%s in a trusted namespace: %v", ann, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), ann) || !strings.Contains(err.Error(), "trusted_namespaces") {
				t.Errorf("%s in namespace %s: %v; want a refusal naming the annotation and trusted_namespaces", ann, ns, err)
			}
			if err != nil && strings.Contains(err.Error(), d.Image) {
				t.Errorf("the refusal shows the default image: %v", err)
			}
		}
	}
	pod := &corev1.Pod{}
	pod.Namespace = "web"
	pod.Annotations = map[string]string{AnnotationInject: "true", AnnotationTopics: "orders:4", AnnotationSubscriptions: "orders:billing",
		AnnotationConfig: "orders-spool", AnnotationDrainTimeout: "20s", AnnotationCPURequest: "100m", AnnotationMemoryRequest: "64Mi",
		AnnotationCPULimit: "1", AnnotationMemoryLimit: "256Mi"}
	if _, err := Inject(pod, d); err != nil {
		t.Errorf("the pod's own settings refused: %v", err)
	}
	// An annotation the injector does not know is refused, not ignored: a
	// misspelt one would otherwise change nothing silently.
	pod.Annotations["spool.dev/imagee"] = "x"
	if _, err := Inject(pod, d); err == nil || !strings.Contains(err.Error(), "spool.dev/imagee") {
		t.Errorf("an unknown spool.dev annotation: %v", err)
	}
}

// A pod on the host's network is refused: spoold's admin port, on
// loopback, would be the node's loopback, and its probe port the node's.
func TestHostNetworkPodsRefused(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}
	pod.Annotations = map[string]string{AnnotationInject: "true"}
	if _, err := Inject(pod, d); err == nil || !strings.Contains(err.Error(), "hostNetwork") {
		t.Fatalf("a hostNetwork pod: %v; want a refusal naming hostNetwork", err)
	}
	pod.Annotations = nil // not asking for the sidecar: none of the injector's business
	if res, err := Inject(pod, d); err != nil || len(res.Patch) != 0 {
		t.Fatalf("a hostNetwork pod without the annotation: %v, %d ops", err, len(res.Patch))
	}
}

// The Redis password Secret is given only with the injector's own Redis
// addresses: a defaults file with the Secret and no address would let a
// pod's config file choose where the password goes.
func TestRedisSecretNeedsItsAddresses(t *testing.T) {
	_, err := ParseDefaults([]byte("image: x\nredis_password_secret: {name: s, key: password}\n"))
	if err == nil || !strings.Contains(err.Error(), "redis_addrs") {
		t.Fatalf("a Redis Secret without redis_addrs: %v", err)
	}
}

// The operator's Redis beyond the pod is reached over TLS (redis_tls_secret,
// redis_tls_server_name) or the operator says redis_insecure: spoold gets
// --insecure-plaintext-remotes and starts. A trusted pod that names a Redis
// of its own when the defaults say neither is refused, naming both.
func TestRedisPlaintextNeedsTheOptOut(t *testing.T) {
	d, err := ParseDefaults([]byte("image: x\nredis_addrs: [\"redis.spool:6379\"]\nredis_insecure: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Annotations = "shop", map[string]string{AnnotationInject: "true"}
	res, err := Inject(pod, d)
	if err != nil {
		t.Fatal(err)
	}
	args := res.Patch[0].Value.([]corev1.Container)[0].Args
	cfg, err := config.Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), args, func(string) (string, bool) { return "", false })
	if err != nil || !cfg.Guards.InsecurePlaintextRemotes || cfg.Redis.TLS.On() {
		t.Fatalf("redis_insecure: spoold's view of %q: %v", args, err)
	}
	if _, err := ParseDefaults([]byte("image: x\nredis_addrs: [\"127.0.0.1:6379\"]\n")); err != nil {
		t.Fatalf("a loopback Redis needs neither TLS nor the opt-out: %v", err)
	}
	d, err = ParseDefaults([]byte("image: x\ntrusted_namespaces: [spool-ops]\n"))
	if err != nil {
		t.Fatal(err)
	}
	pod.Namespace, pod.Annotations = "spool-ops", map[string]string{AnnotationInject: "true", AnnotationRedisAddrs: "redis.ops:6379"}
	if _, err := Inject(pod, d); err == nil || !strings.Contains(err.Error(), "redis_tls_secret") || !strings.Contains(err.Error(), "redis_insecure") {
		t.Fatalf("a Redis beyond the pod with neither TLS nor the opt-out in the defaults: %v", err)
	}
}

// A refusal says what to change, never what the operator's defaults are.
func TestRefusalsDoNotShowDefaults(t *testing.T) {
	d, err := ParseDefaults([]byte(testDefaults))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	pod.Namespace = "shop"
	pod.Annotations = map[string]string{AnnotationInject: "true", AnnotationImage: ""}
	_, err = Inject(pod, d)
	if err == nil || strings.Contains(err.Error(), d.Image) {
		t.Fatalf("an empty image annotation: %v; want a refusal without the default image %q", err, d.Image)
	}
}
