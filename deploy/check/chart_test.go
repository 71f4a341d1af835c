package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/spoolmq/spool/sidecar/config"
)

const chartDir = "../helm/spool"

// render is `helm template` of the chart with one values file ("" for the
// defaults) as release "orders" in namespace "shop".
func render(t *testing.T, valuesFile string, install bool) ([]object, error) {
	t.Helper()
	return renderWith(t, renderOpts{install: install}, valuesFile)
}

// renderOpts: the release (default "orders"), install or upgrade, and the
// Kubernetes objects the chart's lookups find (none: as helm template).
type renderOpts struct {
	release string
	install bool
	cluster engine.ClientProvider
}

// renderWith renders the chart with values files merged in order (a later
// file's values win), in namespace "shop", and decodes what it renders.
func renderWith(t *testing.T, o renderOpts, valuesFiles ...string) ([]object, error) {
	t.Helper()
	files, err := renderFiles(t, o, valuesFiles...)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []object
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") || strings.TrimSpace(files[n]) == "" {
			continue
		}
		o, err := decodeManifests(n, []byte(files[n]))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// renderNotes is the NOTES.txt the chart prints after an install.
func renderNotes(t *testing.T, valuesFiles ...string) (string, error) {
	t.Helper()
	files, err := renderFiles(t, renderOpts{install: true}, valuesFiles...)
	return files["spool/templates/NOTES.txt"], err
}

// renderFiles is what the chart renders, file by file.
func renderFiles(t *testing.T, o renderOpts, valuesFiles ...string) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := chartutil.Values{}
	for _, vf := range valuesFiles {
		if vf == "" {
			continue
		}
		v, err := chartutil.ReadValuesFile(vf)
		if err != nil {
			t.Fatal(err)
		}
		vals = chartutil.MergeTables(v, vals)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	opts := chartutil.ReleaseOptions{Name: cmpOr(o.release, "orders"), Namespace: "shop", Revision: 1, IsInstall: o.install, IsUpgrade: !o.install}
	top, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return nil, err
	}
	var files map[string]string
	if o.cluster != nil {
		files, err = engine.RenderWithClientProvider(ch, top, o.cluster)
	} else {
		files, err = engine.Render(ch, top)
	}
	return files, err
}

// valuesFiles are the documented values: the defaults and every example.
func valuesFiles(t *testing.T) []string {
	ex, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(ex) == 0 {
		t.Fatalf("no example values files (%v)", err)
	}
	return append([]string{defaultsFile(t)}, ex...)
}

// defaultsFile is a values file named "defaults": the chart's defaults
// with the one choice they leave to the user, how the nodes authenticate
// each other (the defaults alone fail: TestChartRefusesClusterWithoutPeerTLS).
func defaultsFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "defaults")
	if err := writeFile(p, "cluster:\n  tls:\n    secretName: orders-peer-tls\n"); err != nil {
		t.Fatal(err)
	}
	return p
}

// The chart renders with every documented values file, on install and on
// upgrade; what it renders decodes strictly, its pods are coherent, and
// spoold accepts the configuration of every pod.
func TestChartRendersEveryValuesFile(t *testing.T) {
	for _, vf := range valuesFiles(t) {
		for _, install := range []bool{true, false} {
			name := fmt.Sprintf("%s/install=%v", cmpOr(filepath.Base(vf), "defaults"), install)
			t.Run(name, func(t *testing.T) {
				objs, err := render(t, vf, install)
				if err != nil {
					t.Fatal(err)
				}
				checkWorkloads(t, objs)
			})
		}
	}
}

func cmpOr(s, d string) string {
	if s == "." || s == "" {
		return d
	}
	return s
}

// checkWorkloads runs the pod checks and resolves spoold's configuration in
// every pod of every workload (each index of a StatefulSet).
func checkWorkloads(t *testing.T, objs []object) []*corev1.PodSpec {
	t.Helper()
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok {
			cms[cm.Name] = cm
		}
	}
	var specs []*corev1.PodSpec
	n := 0
	for _, o := range objs {
		var spec *corev1.PodSpec
		var labels, annotations map[string]string
		replicas, claims, base := int32(1), []string(nil), o.name
		wanted := int32(1) // replicas of the workload (a Deployment's pods are simulated once)
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			spec, labels, annotations = &w.Spec.Template.Spec, w.Spec.Template.Labels, w.Spec.Template.Annotations
			base += "-7d9f8c6b5d-x2x9q"
			if w.Spec.Replicas != nil {
				wanted = *w.Spec.Replicas
			}
		case *appsv1.StatefulSet:
			spec, labels, annotations = &w.Spec.Template.Spec, w.Spec.Template.Labels, w.Spec.Template.Annotations
			if w.Spec.Replicas != nil {
				replicas = *w.Spec.Replicas
			}
			wanted = replicas
			for _, c := range w.Spec.VolumeClaimTemplates {
				claims = append(claims, c.Name)
			}
		default:
			continue
		}
		n++
		specs = append(specs, spec)
		if err := checkPod(spec, claims); err != nil {
			t.Errorf("%s: %v", o.source, err)
		}
		if err := checkSidecar(spec); err != nil {
			t.Errorf("%s: %v", o.source, err)
		}
		if err := checkProbes(spec); err != nil {
			t.Errorf("%s: %v", o.source, err)
		}
		for i := range int(replicas) {
			pod := base
			if _, sts := o.obj.(*appsv1.StatefulSet); sts {
				pod = fmt.Sprintf("%s-%d", o.name, i)
			}
			cfg, err := resolveSpoold(t, spec, cms, pod, i)
			if err != nil {
				t.Errorf("%s, pod %s: %v", o.source, pod, err)
				continue
			}
			if port := annotations["prometheus.io/port"]; port != "" && !strings.HasSuffix(cfg.Node.ProbeListen, ":"+port) {
				t.Errorf("%s, pod %s: Prometheus scrapes port %s, not node.probe_listen %q", o.source, pod, port, cfg.Node.ProbeListen)
			}
			if err := checkGrace(spec, cfg); err != nil {
				t.Errorf("%s, pod %s: %v", o.source, pod, err)
			}
			if err := checkPeers(objs, labels, wanted, cfg); err != nil {
				t.Errorf("%s, pod %s: %v", o.source, pod, err)
			}
			if _, sts := o.obj.(*appsv1.StatefulSet); sts && cfg.Cluster.LeaveOnShutdown {
				t.Errorf("%s, pod %s: cluster.leave_on_shutdown in a StatefulSet: a pod that restarts on its volume would move all its replicas away and come back removed from the cluster", o.source, pod)
			}
		}
	}
	if n == 0 {
		t.Errorf("no workload among %d objects", len(objs))
	}
	return specs
}

// checkProbes: spoold's start-up probe is /startupz (joined, every replica
// it holds knows its leader: the app container starts after it), its
// readiness /readyz and its liveness /healthz (which never depends on the
// disk, the peers or the app).
func checkProbes(spec *corev1.PodSpec) error {
	c := spooldContainer(spec)
	if c == nil {
		return fmt.Errorf("no spoold container")
	}
	var errs []error
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"startupProbe", c.StartupProbe, "/startupz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		got := "none"
		if p.probe != nil && p.probe.HTTPGet != nil {
			got = p.probe.HTTPGet.Path
		}
		if got != p.path {
			errs = append(errs, fmt.Errorf("spoold's %s must be an HTTP GET of %s (docs/operations.md, \"Probes\"), not %s", p.what, p.path, got))
		}
	}
	return errors.Join(errs...)
}

// checkGrace: the pod's grace period covers spoold's shutdown, which begins
// only once the app has exited: its drain, its departure from the cluster
// when it leaves as it stops, and 5 s to close its servers.
func checkGrace(spec *corev1.PodSpec, cfg *config.Config) error {
	need := cfg.Node.DrainTimeout + 5*time.Second
	if cfg.Cluster.LeaveOnShutdown && cfg.Cluster.Storage == config.StorageOn {
		need += cfg.Cluster.LeaveTimeout
	}
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < need {
		return fmt.Errorf("terminationGracePeriodSeconds %v is shorter than spoold's shutdown (%v: drain, leave, closing): it would be killed half way", grace, need)
	}
	return nil
}

// checkPeers: pods that form their cluster themselves (bootstrap_expect)
// join through a headless Service among the manifests that selects them and
// publishes their addresses before they are ready (nodes forming the
// cluster are not ready yet), and expect as many pods as the workload
// starts: fewer would let a subset create the cluster, more would never
// create it.
func checkPeers(objs []object, podLabels map[string]string, replicas int32, cfg *config.Config) error {
	n := cfg.Cluster.BootstrapExpect
	if n == 0 {
		return nil
	}
	if n != int(replicas) {
		return fmt.Errorf("cluster.bootstrap_expect %d, but the workload starts %d pods", n, replicas)
	}
	for _, j := range cfg.Cluster.Join {
		host, _, _ := strings.Cut(j, ":")
		name, _, _ := strings.Cut(host, ".")
		for _, o := range objs {
			svc, ok := o.obj.(*corev1.Service)
			if !ok || svc.Name != name {
				continue
			}
			if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
				return fmt.Errorf("cluster.join %s names Service %s, which must be headless (clusterIP: None) and publish not-ready addresses: its name must resolve to every pod, ready or not", j, name)
			}
			for k, v := range svc.Spec.Selector {
				if podLabels[k] != v {
					return fmt.Errorf("Service %s selects %s=%s, which the pods do not carry: it would not resolve to them", name, k, v)
				}
			}
			return nil
		}
	}
	return fmt.Errorf("cluster.bootstrap_expect %d, but no entry of cluster.join %q names a Service among the manifests: the pods would not find each other", n, cfg.Cluster.Join)
}

func spooldContainer(spec *corev1.PodSpec) *corev1.Container {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if cs[i].Name == "spoold" {
				return &cs[i]
			}
		}
	}
	return nil
}

// checkSidecar: next to an app spoold is a native sidecar (an init
// container with restartPolicy Always) sharing the socket directory with
// every app container, which is told where it is.
func checkSidecar(spec *corev1.PodSpec) error {
	for _, c := range spec.Containers {
		if c.Name == "spoold" {
			if len(spec.Containers) == 1 {
				return nil // spoold alone: storage nodes
			}
			return fmt.Errorf("spoold is a regular container next to an app: make it an init container with restartPolicy Always")
		}
	}
	var sidecar *corev1.Container
	for i, c := range spec.InitContainers {
		if c.Name == "spoold" {
			sidecar = &spec.InitContainers[i]
		}
	}
	if sidecar == nil {
		return fmt.Errorf("no spoold container")
	}
	if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return fmt.Errorf("spoold is an init container without restartPolicy Always: it would have to exit before the app starts")
	}
	socketVol := ""
	for _, m := range sidecar.VolumeMounts {
		if m.MountPath == "/run/spool" {
			socketVol = m.Name
		}
	}
	for _, c := range spec.Containers {
		ok := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == socketVol && m.MountPath == "/run/spool" })
		addr := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "SPOOL_ADDR" && e.Value == "unix:///run/spool/app.sock"
		})
		if !ok || !addr {
			return fmt.Errorf("app container %s does not see spoold's socket (mount of %q at /run/spool: %v, SPOOL_ADDR: %v)", c.Name, socketVol, ok, addr)
		}
	}
	return nil
}

// Pod 0 of a StatefulSet cluster bootstraps on install and joins on
// upgrade; every other pod always joins through the pods before it.
func TestChartBootstrapsOnInstallOnly(t *testing.T) {
	for _, install := range []bool{true, false} {
		objs, err := render(t, defaultsFile(t), install)
		if err != nil {
			t.Fatal(err)
		}
		var sts *appsv1.StatefulSet
		cms := map[string]*corev1.ConfigMap{}
		for _, o := range objs {
			switch w := o.obj.(type) {
			case *appsv1.StatefulSet:
				sts = w
			case *corev1.ConfigMap:
				cms[w.Name] = w
			}
		}
		for i := range 3 {
			cfg, err := resolveSpoold(t, &sts.Spec.Template.Spec, cms, fmt.Sprintf("orders-spool-%d", i), i)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			switch {
			case i == 0 && install:
			case i == 0:
				want = []string{"orders-spool-1.orders-spool-peers:7072", "orders-spool-2.orders-spool-peers:7072"}
			default:
				for j := range i {
					want = append(want, fmt.Sprintf("orders-spool-%d.orders-spool-peers:7072", j))
				}
			}
			if !slices.Equal(cfg.Cluster.Join, want) {
				t.Errorf("install=%v pod %d: join %q, want %q", install, i, cfg.Cluster.Join, want)
			}
		}
	}
}

// cluster.finalize and cluster.autoFinalizeAfter reach every node's
// spool.yaml: auto after 10 minutes by default, or what the values say
// (docs/upgrading.md).
func TestChartFinalizeSettings(t *testing.T) {
	manual := filepath.Join(t.TempDir(), "values.yaml")
	if err := writeFile(manual, "cluster: {finalize: manual, autoFinalizeAfter: 2h}"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files    []string
		finalize string
		after    time.Duration
	}{
		{[]string{defaultsFile(t)}, config.FinalizeAuto, 10 * time.Minute},
		{[]string{defaultsFile(t), manual}, config.FinalizeManual, 2 * time.Hour},
	} {
		objs, err := renderWith(t, renderOpts{install: true}, c.files...)
		if err != nil {
			t.Fatal(err)
		}
		var sts *appsv1.StatefulSet
		cms := map[string]*corev1.ConfigMap{}
		for _, o := range objs {
			switch w := o.obj.(type) {
			case *appsv1.StatefulSet:
				sts = w
			case *corev1.ConfigMap:
				cms[w.Name] = w
			}
		}
		if sts == nil {
			t.Fatal("no StatefulSet rendered")
		}
		for i := range 3 {
			cfg, err := resolveSpoold(t, &sts.Spec.Template.Spec, cms, fmt.Sprintf("orders-spool-%d", i), i)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Cluster.Finalize != c.finalize || cfg.Cluster.AutoFinalizeAfter != c.after {
				t.Errorf("pod %d: cluster.finalize %q auto_finalize_after %v, want %q %v", i, cfg.Cluster.Finalize, cfg.Cluster.AutoFinalizeAfter, c.finalize, c.after)
			}
		}
	}
}

// Values that cannot work fail the render with what to change.
func TestChartRefusesNonsense(t *testing.T) {
	for _, c := range []struct{ values, says string }{
		{"mode: daemonset", "must be statefulset or deployment"},
		{"mode: deployment\ncluster: {storage: \"off\"}", "needs cluster.join"},
		{"mode: deployment\nreplicas: 2", "below cluster.replicationFactor 3"},
		{"mode: deployment\nautoscaling: {enabled: true, group: g}", "autoscale storage-off sidecars"},
		{"mode: deployment\nterminationGracePeriodSeconds: 90", "shorter than spoold's own shutdown (95s: node.drain_timeout 30s + cluster.leave_timeout 60s"},
		{"terminationGracePeriodSeconds: 30", "shorter than spoold's own shutdown (35s"},
		{"spoold: {drainTimeout: 500ms}", "write whole hours, minutes and seconds"},
		{"cluster: {storage: off}", "must be \"on\" or \"off\" (quoted"},
		{"cluster: {storage: \"off\"}", "use mode deployment for storage-off"},
		{"autoscaling: {enabled: true}", "needs mode deployment"},
		{"cluster: {finalize: later}", "cluster.finalize \"later\": must be auto or manual"},
		{"cluster: {autoFinalizeAfter: 30s}", "cluster.autoFinalizeAfter 30s: must be between 1m and 168h"},
	} {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := writeFile(f, c.values); err != nil {
			t.Fatal(err)
		}
		_, err := renderWith(t, renderOpts{install: true}, defaultsFile(t), f)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v; want a failure saying %q", c.values, err, c.says)
		}
	}
}

// Storage nodes of a Deployment: one spool.yaml for every pod, which joins
// through the peers Service (every pod's address, published before the pods
// are ready), lets the pods that start together form the cluster
// (bootstrap_expect = replicas) and leaves the cluster when it stops, within
// a grace period computed from the drain and the leave. A new pod comes
// first in a rolling update, so the nodes never drop below the replication
// factor while one leaves.
func TestChartDeploymentStorage(t *testing.T) {
	for _, install := range []bool{true, false} {
		objs, err := render(t, filepath.Join(chartDir, "examples", "deployment-storage.yaml"), install)
		if err != nil {
			t.Fatal(err)
		}
		var dep *appsv1.Deployment
		var peers *corev1.Service
		cms := map[string]*corev1.ConfigMap{}
		for _, o := range objs {
			switch w := o.obj.(type) {
			case *appsv1.Deployment:
				dep = w
			case *corev1.Service:
				if w.Spec.ClusterIP == corev1.ClusterIPNone {
					peers = w
				}
			case *corev1.ConfigMap:
				cms[w.Name] = w
			}
		}
		if dep == nil || peers == nil {
			t.Fatalf("want a Deployment and a headless peers Service, got %d objects", len(objs))
		}
		if !peers.Spec.PublishNotReadyAddresses {
			t.Error("the peers Service must publish not-ready addresses: nodes forming the cluster are not ready yet and must see each other")
		}
		for k, v := range peers.Spec.Selector {
			if dep.Spec.Template.Labels[k] != v {
				t.Errorf("the peers Service selects %s=%s, which the pods do not carry", k, v)
			}
		}
		if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
			t.Errorf("rolling update %+v: want maxSurge 1 and maxUnavailable 0 (a new node joins before an old one leaves)", dep.Spec.Strategy.RollingUpdate)
		}
		spec := &dep.Spec.Template.Spec
		cfg, err := resolveSpoold(t, spec, cms, "orders-spool-7d9f8c6b5d-x2x9q", 0)
		if err != nil {
			t.Fatal(err)
		}
		cl := cfg.Cluster
		want := []string{peers.Name + ".shop.svc:7072"}
		if !slices.Equal(cl.Join, want) || cl.BootstrapExpect != int(*dep.Spec.Replicas) || !cl.LeaveOnShutdown || cl.LeaveTimeout != time.Minute || cl.Storage != config.StorageOn {
			t.Errorf("install=%v: cluster join %q bootstrap_expect %d leave_on_shutdown %v leave_timeout %v storage %s; want join %q, bootstrap_expect %d, leaving within 60s",
				install, cl.Join, cl.BootstrapExpect, cl.LeaveOnShutdown, cl.LeaveTimeout, cl.Storage, want, *dep.Spec.Replicas)
		}
		if !cfg.Node.ReadyRequiresApp {
			t.Error("readyRequiresApp: true did not reach node.ready_requires_app")
		}
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 30+30+60+15 {
			t.Errorf("terminationGracePeriodSeconds %v: want 135 (app 30 s, drain 30 s, leave 60 s, 15 s more)", g)
		}
	}
}
