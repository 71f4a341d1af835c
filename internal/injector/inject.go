package injector

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The annotations the injector reads (and one it writes). Each override
// replaces the default of the same name for this pod only.
const (
	AnnotationInject        = "spool.dev/inject"        // "true": add the sidecar
	AnnotationStatus        = "spool.dev/status"        // written: "injected"
	AnnotationImage         = "spool.dev/image"         // spoold's image
	AnnotationConfig        = "spool.dev/config"        // ConfigMap with spool.yaml; "" for none
	AnnotationTopics        = "spool.dev/topics"        // comma list of name[:partitions] (--topic)
	AnnotationSubscriptions = "spool.dev/subscriptions" // comma list of topic:group (--subscription)
	AnnotationRedisAddrs    = "spool.dev/redis-addrs"   // comma list of host:port (--redis-addr)
	AnnotationClusterJoin   = "spool.dev/cluster-join"  // comma list of host:port: a storage-off sidecar of that cluster (--cluster-storage off --join)
	AnnotationDrainTimeout  = "spool.dev/drain-timeout" // a duration, like 30s (--drain-timeout)

	AnnotationClusterTLSSecret  = "spool.dev/cluster-tls-secret"  // Secret with the cluster's tls.crt, tls.key, ca.crt; "" for none
	AnnotationClusterJoinSecret = "spool.dev/cluster-join-secret" // Secret whose key "secret" is the join secret; "" for none
	AnnotationClusterInsecure   = "spool.dev/cluster-insecure"    // "true": no TLS to the cluster's members (--cluster-insecure)
	AnnotationCPURequest        = "spool.dev/cpu-request"         // quantity
	AnnotationMemoryRequest     = "spool.dev/memory-request"      // quantity
	AnnotationCPULimit          = "spool.dev/cpu-limit"           // quantity
	AnnotationMemoryLimit       = "spool.dev/memory-limit"        // quantity
)

// The trust model (docs/kubernetes.md, "Who may change what"): a pod's
// author chooses what concerns the pod alone; what decides where the
// operator's credentials go, or what runs with them, is the operator's,
// from the defaults file. restrictedAnnotations are honoured only in the
// defaults' trusted_namespaces; elsewhere a pod that sets one is refused.
var (
	podAnnotations = []string{AnnotationInject, AnnotationStatus, AnnotationConfig, AnnotationTopics, AnnotationSubscriptions,
		AnnotationDrainTimeout, AnnotationCPURequest, AnnotationMemoryRequest, AnnotationCPULimit, AnnotationMemoryLimit,
		// Secrets of the pod's own namespace, which any pod there may mount.
		AnnotationClusterTLSSecret, AnnotationClusterJoinSecret, AnnotationClusterInsecure}
	// The image runs with the Redis password Secret; the Redis addresses
	// and the cluster's members are where the password and the sidecar's
	// cluster credentials are sent.
	restrictedAnnotations = []string{AnnotationImage, AnnotationRedisAddrs, AnnotationClusterJoin}
)

// StatusInjected is the value of AnnotationStatus on an injected pod.
const StatusInjected = "injected"

// PatchOp is one JSONPatch (RFC 6902) operation. The injector only adds.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Result is what Inject decided for one pod.
type Result struct {
	// Patch is empty when the pod is left as it is: not asking for the
	// sidecar, or already injected.
	Patch []PatchOp
	// Warnings are shown to whoever created the pod (kubectl prints them).
	Warnings []string
}

// Inject decides what to add to pod. An error means the pod asked for the
// sidecar with annotations that cannot work: the pod is refused with the
// error's text, which says which annotation and what is allowed.
func Inject(pod *corev1.Pod, d Defaults) (Result, error) {
	ann := pod.Annotations
	if ann[AnnotationInject] != "true" {
		return Result{}, nil
	}
	if injected(pod) {
		return Result{}, nil
	}
	if pod.Spec.HostNetwork {
		return Result{}, fmt.Errorf("spool injector: the pod has hostNetwork: true, where spoold's admin port (127.0.0.1:%d) would be the node's loopback and its probe port the node's: run the pod on its own network, or remove the %s annotation", AdminPort, AnnotationInject)
	}
	if err := checkAnnotations(ann, pod.Namespace, d); err != nil {
		return Result{}, err
	}
	s, err := settingsFor(ann, d)
	if err != nil {
		return Result{}, err
	}
	s.podUser = pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsUser != nil
	for _, v := range pod.Spec.Volumes {
		switch v.Name {
		case SocketVolume, DataVolume, ConfigVolume, TLSVolume, JoinVolume, RedisTLSVolume:
			return Result{}, fmt.Errorf("spool injector: the pod already has a volume named %q, which the sidecar needs: rename it, or remove the %s annotation", v.Name, AnnotationInject)
		}
	}
	var r Result
	r.Patch = append(r.Patch, addAll("/spec/initContainers", len(pod.Spec.InitContainers) == 0, true, sidecar(s))...)
	vols := []any{
		corev1.Volume{Name: SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: DataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if s.config != "" {
		vols = append(vols, corev1.Volume{Name: ConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.config},
		}}})
	}
	if s.tlsSecret != "" {
		vols = append(vols, corev1.Volume{Name: TLSVolume, VolumeSource: corev1.VolumeSource{Secret: secretFiles(s.tlsSecret, "tls.crt", "tls.key", "ca.crt")}})
	}
	if s.joinSecret != "" {
		vols = append(vols, corev1.Volume{Name: JoinVolume, VolumeSource: corev1.VolumeSource{Secret: secretFiles(s.joinSecret, "secret")}})
	}
	if s.redisTLSSecret != "" {
		vols = append(vols, corev1.Volume{Name: RedisTLSVolume, VolumeSource: corev1.VolumeSource{Secret: secretFiles(s.redisTLSSecret, "ca.crt", "tls.crt", "tls.key")}})
	}
	r.Patch = append(r.Patch, addAll("/spec/volumes", len(pod.Spec.Volumes) == 0, false, vols...)...)
	for i, c := range pod.Spec.Containers {
		base := "/spec/containers/" + strconv.Itoa(i)
		if !mountsDir(c, SocketDir) {
			r.Patch = append(r.Patch, addAll(base+"/volumeMounts", len(c.VolumeMounts) == 0, false,
				corev1.VolumeMount{Name: SocketVolume, MountPath: SocketDir})...)
		}
		if !hasEnv(c, AddrEnv) {
			r.Patch = append(r.Patch, addAll(base+"/env", len(c.Env) == 0, false,
				corev1.EnvVar{Name: AddrEnv, Value: SocketAddr})...)
		}
	}
	add := map[string]string{AnnotationStatus: StatusInjected}
	for k, v := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(ProbePort), "prometheus.io/path": "/metrics"} {
		if _, ok := ann[k]; !ok {
			add[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(add)) {
		r.Patch = append(r.Patch, PatchOp{Op: "add", Path: "/metadata/annotations/" + escape(k), Value: add[k]})
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if time.Duration(grace)*time.Second < s.drain {
		r.Warnings = append(r.Warnings, fmt.Sprintf("spool injector: terminationGracePeriodSeconds (%d) is shorter than spoold's drain timeout (%v): the app stops first and spoold after it, within the same grace period, so spoold may be killed before it has committed; raise terminationGracePeriodSeconds or lower %s", grace, s.drain, AnnotationDrainTimeout))
	}
	return r, nil
}

// checkAnnotations refuses spool.dev annotations the injector does not
// know (a misspelt one would change nothing, silently) and restricted ones
// outside the operator's trusted namespaces.
func checkAnnotations(ann map[string]string, namespace string, d Defaults) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		if !strings.HasPrefix(k, "spool.dev/") || slices.Contains(podAnnotations, k) {
			continue
		}
		if !slices.Contains(restrictedAnnotations, k) {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s is not one the injector reads (docs/kubernetes.md, \"The injector\"): remove it", k))
			continue
		}
		if !slices.Contains(d.TrustedNamespaces, namespace) {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s may be set only in namespaces the injector's operator trusts (trusted_namespaces of its defaults): remove it to use the operator's setting, or ask the operator to trust namespace %q", k, namespace))
		}
	}
	return errors.Join(errs...)
}

// injected reports whether the pod already has the sidecar (injected
// before, or written into the pod by hand).
func injected(pod *corev1.Pod) bool {
	if pod.Annotations[AnnotationStatus] == StatusInjected {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == ContainerName {
				return true
			}
		}
	}
	return false
}

// settings are the defaults with the pod's overrides applied.
type settings struct {
	image, pullPolicy, config string
	topics, subs, redis, join []string
	drain                     time.Duration
	resources                 corev1.ResourceRequirements
	redisSecret               SecretKey
	extraArgs                 []string
	// The cluster's peer certificate and join secret (Secret names), or
	// insecure: for pods with a join list, or named by the pod itself.
	tlsSecret, joinSecret string
	insecure              bool
	// TLS to Redis (a Secret's name, a server name) or the opt-out: the
	// defaults', for pods that get Redis addresses.
	redisTLSSecret, redisServerName string
	redisInsecure                   bool
	// podUser: the pod's securityContext names a runAsUser, which spoold
	// then shares with the app (the socket's mode lets only spoold's user
	// in); otherwise spoold runs as RunAsUser.
	podUser bool
}

func settingsFor(ann map[string]string, d Defaults) (settings, error) {
	s := settings{image: d.Image, pullPolicy: d.ImagePullPolicy, config: d.Config, redis: d.RedisAddrs, join: d.ClusterJoin,
		drain: d.DrainTimeout, redisSecret: d.RedisPasswordSecret, extraArgs: d.Args}
	var errs []error
	if v, ok := ann[AnnotationImage]; ok {
		if v == "" {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s is empty: give spoold's image, or remove the annotation to use the operator's", AnnotationImage))
		}
		s.image = v
	}
	if v, ok := ann[AnnotationConfig]; ok {
		s.config = v
	}
	s.topics = list(ann[AnnotationTopics])
	s.subs = list(ann[AnnotationSubscriptions])
	for _, sub := range s.subs {
		if t, g, ok := strings.Cut(sub, ":"); !ok || t == "" || g == "" {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s: %q is not topic:group", AnnotationSubscriptions, sub))
		}
	}
	if v, ok := ann[AnnotationRedisAddrs]; ok {
		s.redis = list(v)
	}
	if len(s.redis) > 0 {
		s.redisTLSSecret, s.redisServerName, s.redisInsecure = d.RedisTLSSecret, d.RedisTLSServerName, d.RedisInsecure
		if redisSecurity(s.redis, d) != "" {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s: the injector's defaults give no TLS to Redis: its operator sets redis_tls_secret or redis_insecure: true", AnnotationRedisAddrs))
		}
	}
	if v, ok := ann[AnnotationClusterJoin]; ok {
		s.join = list(v)
		for _, j := range s.join {
			if err := checkHostPort(j); err != nil {
				errs = append(errs, fmt.Errorf("spool injector: annotation %s: %q %v: give members of the cluster as host:port, like spool-peers.shop.svc:7072, or leave it empty for no cluster", AnnotationClusterJoin, j, err))
			}
		}
	}
	errs = append(errs, s.peerSecurity(ann, d)...)
	if v, ok := ann[AnnotationDrainTimeout]; ok {
		dt, err := time.ParseDuration(v)
		if err != nil || dt <= 0 {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s = %q: must be a positive duration with a unit, like 30s", AnnotationDrainTimeout, v))
		}
		s.drain = dt
	}
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	for _, q := range []struct {
		annotation, def string
		list            corev1.ResourceList
		name            corev1.ResourceName
	}{
		{AnnotationCPURequest, d.CPURequest, requests, corev1.ResourceCPU},
		{AnnotationMemoryRequest, d.MemoryRequest, requests, corev1.ResourceMemory},
		{AnnotationCPULimit, d.CPULimit, limits, corev1.ResourceCPU},
		{AnnotationMemoryLimit, d.MemoryLimit, limits, corev1.ResourceMemory},
	} {
		v, ok := ann[q.annotation]
		if !ok {
			v = q.def
		}
		if v == "" {
			continue
		}
		qty, err := resource.ParseQuantity(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s = %q: not a Kubernetes quantity (like 250m or 128Mi)", q.annotation, v))
			continue
		}
		q.list[q.name] = qty
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okr := requests[name]
		lim, okl := limits[name]
		if okr && okl && req.Cmp(lim) > 0 {
			errs = append(errs, fmt.Errorf("spool injector: the sidecar's %s request (%s) is above its limit (%s): lower the request or raise the limit (annotations %s-request, %s-limit)", name, req.String(), lim.String(), "spool.dev/"+string(name), "spool.dev/"+string(name)))
		}
	}
	if len(requests) > 0 {
		s.resources.Requests = requests
	}
	if len(limits) > 0 {
		s.resources.Limits = limits
	}
	return s, errors.Join(errs...)
}

// peerSecurity sets how the sidecar authenticates to the cluster's
// members. The defaults' Secrets go to pods that get a join list (a
// single-node pod's namespace need not hold them); an annotation applies
// to its pod whatever it is (a cluster in its own spool.yaml). A pod with
// a join list needs TLS or says insecure: the members refuse plaintext.
func (s *settings) peerSecurity(ann map[string]string, d Defaults) []error {
	var errs []error
	if len(s.join) > 0 {
		s.tlsSecret, s.joinSecret, s.insecure = d.ClusterTLSSecret, d.ClusterJoinSecret, d.ClusterInsecure
	}
	if v, ok := ann[AnnotationClusterTLSSecret]; ok {
		s.tlsSecret = v
	}
	if v, ok := ann[AnnotationClusterJoinSecret]; ok {
		s.joinSecret = v
	}
	if v, ok := ann[AnnotationClusterInsecure]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("spool injector: annotation %s = %q: must be true or false", AnnotationClusterInsecure, v))
		}
		s.insecure = b
	}
	switch {
	case s.tlsSecret != "" && s.insecure:
		errs = append(errs, fmt.Errorf("spool injector: %s and %s: set one (TLS to the cluster's members, or none)", AnnotationClusterTLSSecret, AnnotationClusterInsecure))
	case len(s.join) > 0 && s.tlsSecret == "" && !s.insecure:
		errs = append(errs, fmt.Errorf("spool injector: a storage-off sidecar (%s) needs the cluster's peer certificate: name a Secret with its tls.crt, tls.key and ca.crt in annotation %s (or the injector's default cluster_tls_secret), or set %s: \"true\" if nothing else can reach the members' peer port", AnnotationClusterJoin, AnnotationClusterTLSSecret, AnnotationClusterInsecure))
	}
	return errs
}

// secretFiles is a Secret volume of the given keys, each a file of its
// own name, readable by the pod's user and group only.
func secretFiles(name string, keys ...string) *corev1.SecretVolumeSource {
	mode := int32(0o440)
	v := &corev1.SecretVolumeSource{SecretName: name, DefaultMode: &mode}
	for _, k := range keys {
		v.Items = append(v.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	return v
}

// sidecar is the spoold container: an init container that keeps running
// (restartPolicy Always), started before the app and stopped after it.
func sidecar(s settings) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	// AdminService on loopback only (kubectl exec ... spool reaches it),
	// probes and /metrics on the pod IP.
	args := []string{"--data-dir", DataDir, "--app-listen", SocketAddr, "--admin-listen", "127.0.0.1:" + strconv.Itoa(AdminPort),
		"--probe-listen", "0.0.0.0:" + strconv.Itoa(ProbePort),
		"--drain-timeout", s.drain.String()}
	mounts := []corev1.VolumeMount{{Name: SocketVolume, MountPath: SocketDir}, {Name: DataVolume, MountPath: DataDir}}
	if s.config != "" {
		args = append([]string{"--config", ConfigDir + "/" + configFileName}, args...)
		mounts = append(mounts, corev1.VolumeMount{Name: ConfigVolume, MountPath: ConfigDir, ReadOnly: true})
	}
	if len(s.redis) > 0 {
		args = append(args, "--redis-addr", strings.Join(s.redis, ","))
	}
	if s.redisTLSSecret != "" {
		args = append(args, "--redis-tls-ca-file", RedisTLSDir+"/ca.crt", "--redis-tls-cert-file", RedisTLSDir+"/tls.crt", "--redis-tls-key-file", RedisTLSDir+"/tls.key")
		mounts = append(mounts, corev1.VolumeMount{Name: RedisTLSVolume, MountPath: RedisTLSDir, ReadOnly: true})
	}
	if s.redisServerName != "" {
		args = append(args, "--redis-tls-server-name", s.redisServerName)
	}
	if s.redisInsecure {
		args = append(args, "--insecure-plaintext-remotes")
	}
	if len(s.join) > 0 {
		// A client of the cluster, holding nothing: its emptyDir may go
		// with the pod.
		args = append(args, "--cluster-storage", "off", "--join", strings.Join(s.join, ","))
	}
	if s.tlsSecret != "" {
		args = append(args, "--cluster-tls-cert-file", TLSDir+"/tls.crt", "--cluster-tls-key-file", TLSDir+"/tls.key", "--cluster-tls-ca-file", TLSDir+"/ca.crt")
		mounts = append(mounts, corev1.VolumeMount{Name: TLSVolume, MountPath: TLSDir, ReadOnly: true})
	}
	if s.insecure {
		args = append(args, "--cluster-insecure")
	}
	if s.joinSecret != "" {
		args = append(args, "--cluster-join-secret-file", JoinSecretDir+"/secret")
		mounts = append(mounts, corev1.VolumeMount{Name: JoinVolume, MountPath: JoinSecretDir, ReadOnly: true})
	}
	for _, t := range s.topics {
		args = append(args, "--topic", t)
	}
	for _, sub := range s.subs {
		args = append(args, "--subscription", sub)
	}
	args = append(args, s.extraArgs...)
	env := []corev1.EnvVar{{Name: "SPOOL_NODE_ID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	if s.redisSecret.Name != "" {
		env = append(env, corev1.EnvVar{Name: "SPOOL_REDIS_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.redisSecret.Name}, Key: s.redisSecret.Key,
		}}})
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("spool-probe")}},
			PeriodSeconds:    period,
			TimeoutSeconds:   5,
			FailureThreshold: failures,
		}
	}
	no, yes := false, true
	// What the "restricted" Pod Security Standard asks of a container,
	// set on spoold itself so that it holds whatever the pod says. The
	// user is a number (the kubelet cannot check a name against
	// runAsNonRoot and refuses to start the container): the pod's, which
	// the app shares and so can use the socket, or else the image's.
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		RunAsNonRoot:             &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if !s.podUser {
		uid := int64(RunAsUser)
		sc.RunAsUser, sc.RunAsGroup = &uid, &uid
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           s.image,
		ImagePullPolicy: corev1.PullPolicy(s.pullPolicy),
		RestartPolicy:   &always,
		Args:            args,
		Env:             env,
		Ports:           []corev1.ContainerPort{{Name: "spool-probe", ContainerPort: ProbePort}},
		// The app starts once this passes: spoold serves and, in a cluster,
		// has joined and every replica it holds knows its leader. Up to 3
		// minutes (a cluster node may wait 60 s to join).
		StartupProbe:   probe("/startupz", 2, 90),
		ReadinessProbe: probe("/readyz", 5, 3),
		LivenessProbe:  probe("/healthz", 10, 3),
		Resources:      s.resources,
		// No service account token is mounted: spoold never calls the API
		// (the pod's automountServiceAccountToken is the app's).
		SecurityContext: sc,
		VolumeMounts:    mounts,
	}
}

// addAll adds values to the array at path: the whole array when the pod
// has none, else each value at the end (or, with first, at the start, in
// order).
func addAll[T any](path string, empty, first bool, values ...T) []PatchOp {
	if empty {
		return []PatchOp{{Op: "add", Path: path, Value: values}}
	}
	ops := make([]PatchOp, 0, len(values))
	for i, v := range values {
		p := path + "/-"
		if first {
			p = path + "/" + strconv.Itoa(i)
		}
		ops = append(ops, PatchOp{Op: "add", Path: p, Value: v})
	}
	return ops
}

func mountsDir(c corev1.Container, dir string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir || m.Name == SocketVolume {
			return true
		}
	}
	return false
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// list splits a comma list, dropping blanks.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkHostPort says what is wrong with a host:port, or nil.
func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return errors.New("is not host:port")
	}
	if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
		return errors.New("needs a host and a port from 1 to 65535")
	}
	return nil
}

// escape makes a map key a JSON Pointer token (RFC 6901).
func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
