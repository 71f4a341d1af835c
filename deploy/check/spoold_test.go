package check

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/spoolmq/spool/sidecar/config"
)

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand does Kubernetes' $(VAR) expansion of args and env values.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// fieldValue is what the downward API gives a pod named podName at index.
func fieldValue(path, podName string, index int) (string, error) {
	switch path {
	case "metadata.name":
		return podName, nil
	case "metadata.namespace":
		return "shop", nil
	case "status.podIP":
		return "10.1.2." + strconv.Itoa(10+index), nil
	case "metadata.labels['apps.kubernetes.io/pod-index']":
		return strconv.Itoa(index), nil
	}
	return "", fmt.Errorf("downward API field %q is not simulated here", path)
}

// resolveSpoold runs the spoold container of a pod through spoold's own
// configuration sequence (sidecar/config.Resolve): its args and environment
// as the kubelet would expand them, the config file it names read from the
// ConfigMap mounted there. It also checks that the ports spoold listens on
// are the ports the container declares.
func resolveSpoold(t *testing.T, spec *corev1.PodSpec, configMaps map[string]*corev1.ConfigMap, podName string, index int) (*config.Config, error) {
	t.Helper()
	var c *corev1.Container
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if cs[i].Name == "spoold" {
				c = &cs[i]
			}
		}
	}
	if c == nil {
		return nil, fmt.Errorf("no container named spoold")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(e.ValueFrom.FieldRef.FieldPath, podName, index)
			if err != nil {
				return nil, err
			}
			env[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "from-a-secret"
		default:
			return nil, fmt.Errorf("env %s: source not simulated", e.Name)
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a, env)
	}
	dir := t.TempDir()
	for i := 0; i < len(args); i++ {
		var path string
		switch {
		case strings.HasPrefix(args[i], "--config="):
			path = strings.TrimPrefix(args[i], "--config=")
		case args[i] == "--config" && i+1 < len(args):
			i++
			path = args[i]
		default:
			continue
		}
		data, err := mountedFile(spec, c, configMaps, path)
		if err != nil {
			return nil, err
		}
		local := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(local, []byte(data), 0o600); err != nil {
			return nil, err
		}
		if strings.HasPrefix(args[i], "--config=") {
			args[i] = "--config=" + local
		} else {
			args[i] = local
		}
	}
	fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.String("log-level", "info", "") // spoold's own flag (cmd/spoold)
	cfg, err := config.Resolve(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		return nil, fmt.Errorf("spoold refuses its configuration (args %q): %w", c.Args, err)
	}
	ports := map[int32]string{}
	for _, p := range c.Ports {
		ports[p.ContainerPort] = p.Name
	}
	if err := checkAdminAndProbes(c, cfg, ports); err != nil {
		return nil, err
	}
	if err := checkPeerSecurity(spec, c, cfg); err != nil {
		return nil, err
	}
	if f := cfg.Admin.TokensFile; f != "" && !secretMounted(spec, c, filepath.Dir(f)) {
		return nil, fmt.Errorf("spoold's admin.tokens_file %s is in no Secret volume the container mounts", f)
	}
	for what, addr := range map[string]string{"node.probe_listen": cfg.Node.ProbeListen, "cluster.listen": cfg.Cluster.Listen} {
		if addr == "" {
			continue
		}
		_, port, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(port)
		if _, ok := ports[int32(n)]; !ok {
			return nil, fmt.Errorf("spoold's %s is %s, but the container declares no port %d", what, addr, n)
		}
	}
	return cfg, nil
}

// checkAdminAndProbes: AdminService stays off the pod network (loopback or
// a Unix socket) unless it authenticates its callers, and kubelet's probes
// go to the probe listener, which listens beyond loopback (kubelet dials
// the pod IP) and serves nothing else (docs/security.md, "Admin").
func checkAdminAndProbes(c *corev1.Container, cfg *config.Config, ports map[int32]string) error {
	if !config.LoopbackOrUnix(cfg.Node.AdminListen) && !cfg.Admin.AuthConfigured() {
		return fmt.Errorf("spoold's node.admin_listen %s is on the pod network with no admin authentication", cfg.Node.AdminListen)
	}
	probe := cfg.Node.ProbeListen
	if probe == "" || config.LoopbackOrUnix(probe) {
		return fmt.Errorf("spoold's node.probe_listen is %q: kubelet and Prometheus need it on the pod IP (like 0.0.0.0:7073)", probe)
	}
	_, port, _ := net.SplitHostPort(probe)
	n, _ := strconv.Atoi(port)
	name := ports[int32(n)]
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			return fmt.Errorf("spoold lacks an HTTP probe")
		}
		if got := p.HTTPGet.Port; (got.StrVal == "" || got.StrVal != name) && got.IntVal != int32(n) {
			return fmt.Errorf("spoold's probe of %s goes to port %s, not to node.probe_listen %s (port %d, %q)", p.HTTPGet.Path, got.String(), probe, n, name)
		}
	}
	return nil
}

// secretMounted reports whether c mounts a Secret volume at dir.
func secretMounted(spec *corev1.PodSpec, c *corev1.Container, dir string) bool {
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != dir {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}

// mountedFile finds the ConfigMap key a container sees at path.
func mountedFile(spec *corev1.PodSpec, c *corev1.Container, configMaps map[string]*corev1.ConfigMap, path string) (string, error) {
	for _, m := range c.VolumeMounts {
		if filepath.Dir(path) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				return "", fmt.Errorf("volume %s names ConfigMap %q, which is not among the manifests", v.Name, v.ConfigMap.Name)
			}
			data, ok := cm.Data[filepath.Base(path)]
			if !ok {
				return "", fmt.Errorf("spoold reads %s, but ConfigMap %s has no key %s", path, cm.Name, filepath.Base(path))
			}
			return data, nil
		}
	}
	return "", fmt.Errorf("spoold reads %s, which no ConfigMap volume provides", path)
}
