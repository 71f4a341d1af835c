package check

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const chartDir = "../helm/spool"

// render is `helm template` of the chart with one values file ("" for the
// defaults) as release "orders" in namespace "shop".
func render(t *testing.T, valuesFile string, install bool) ([]object, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := chartutil.Values{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			t.Fatal(err)
		}
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	opts := chartutil.ReleaseOptions{Name: "orders", Namespace: "shop", Revision: 1, IsInstall: install, IsUpgrade: !install}
	top, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
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

// valuesFiles are the documented values: the defaults and every example.
func valuesFiles(t *testing.T) []string {
	ex, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(ex) == 0 {
		t.Fatalf("no example values files (%v)", err)
	}
	return append([]string{""}, ex...)
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
		replicas, claims, base := int32(1), []string(nil), o.name
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			spec = &w.Spec.Template.Spec
			base += "-7d9f8c6b5d-x2x9q"
		case *appsv1.StatefulSet:
			spec = &w.Spec.Template.Spec
			if w.Spec.Replicas != nil {
				replicas = *w.Spec.Replicas
			}
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
		for i := range int(replicas) {
			pod := base
			if _, sts := o.obj.(*appsv1.StatefulSet); sts {
				pod = fmt.Sprintf("%s-%d", o.name, i)
			}
			if _, err := resolveSpoold(t, spec, cms, pod, i); err != nil {
				t.Errorf("%s, pod %s: %v", o.source, pod, err)
			}
		}
	}
	if n == 0 {
		t.Errorf("no workload among %d objects", len(objs))
	}
	return specs
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
		objs, err := render(t, "", install)
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

// Values that cannot work fail the render with what to change.
func TestChartRefusesNonsense(t *testing.T) {
	for _, c := range []struct{ values, says string }{
		{"mode: daemonset", "must be statefulset or deployment"},
		{"mode: deployment", "needs cluster.join"},
		{"mode: deployment\ncluster: {join: [a:7072]}", "use cluster.storage \"off\""},
		{"cluster: {storage: off}", "must be \"on\" or \"off\" (quoted"},
		{"cluster: {storage: \"off\"}", "use mode deployment for storage-off"},
		{"autoscaling: {enabled: true}", "needs mode deployment"},
	} {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := writeFile(f, c.values); err != nil {
			t.Fatal(err)
		}
		_, err := render(t, f, true)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v; want a failure saying %q", c.values, err, c.says)
		}
	}
}
