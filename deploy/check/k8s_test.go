package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// object is one manifest, decoded.
type object struct {
	source string // file and document number, for messages
	kind   string
	name   string
	obj    any // a pointer to a k8s.io/api type, or a map for custom resources
}

// newTyped returns the k8s.io/api type of an apiVersion and kind.
func newTyped(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/Namespace":
		return &corev1.Namespace{}, true
	case "v1/Pod":
		return &corev1.Pod{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration":
		return &admissionregistrationv1.MutatingWebhookConfiguration{}, true
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}, true
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}, true
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	}
	return nil, false
}

// customKinds are the resources of other projects' CRDs the examples use;
// k8s.io/api has no type for them, so they are checked by hand (their
// queries, their references) where they are used.
var customKinds = map[string]bool{
	"keda.sh/v1alpha1/ScaledObject":  true,
	"cert-manager.io/v1/Certificate": true,
	"cert-manager.io/v1/Issuer":      true,
}

// decodeManifests splits a multi-document YAML stream and decodes every
// document strictly: an unknown field anywhere fails.
func decodeManifests(source string, data []byte) ([]object, error) {
	var out []object
	for i, doc := range splitYAML(data) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", source, i, err)
		}
		if string(j) == "null" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(j, &head); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", source, i, err)
		}
		where := fmt.Sprintf("%s document %d (%s %s)", source, i, head.Kind, head.Metadata.Name)
		if head.Metadata.Name == "" {
			return nil, fmt.Errorf("%s: no metadata.name", where)
		}
		o := object{source: where, kind: head.Kind, name: head.Metadata.Name}
		if typed, ok := newTyped(head.APIVersion, head.Kind); ok {
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(typed); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			o.obj = typed
		} else if customKinds[head.APIVersion+"/"+head.Kind] {
			var m map[string]any
			_ = json.Unmarshal(j, &m)
			o.obj = m
		} else {
			return nil, fmt.Errorf("%s: apiVersion %s kind %s has no type to check it against: add it to newTyped or customKinds", where, head.APIVersion, head.Kind)
		}
		out = append(out, o)
	}
	return out, nil
}

// splitYAML splits a stream on document separators.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.Bytes())
}

func readManifests(t *testing.T, glob string) []object {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no files (%v)", glob, err)
	}
	var all []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(f, b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objs...)
	}
	return all
}

// podTemplates returns the pod templates of the workloads among objs.
func podTemplates(objs []object) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			out[o.source] = &w.Spec.Template
		case *appsv1.StatefulSet:
			out[o.source] = &w.Spec.Template
		}
	}
	return out
}

// checkPod finds what a strict decode cannot: names that do not resolve.
func checkPod(spec *corev1.PodSpec, claims []string) error {
	var errs []error
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range claims {
		vols[c] = true
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				errs = append(errs, fmt.Errorf("container %s mounts volume %q, which the pod does not have", c.Name, m.Name))
			}
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			if name := p.HTTPGet.Port.StrVal; name != "" && !ports[name] {
				errs = append(errs, fmt.Errorf("container %s probes port %q, which it does not declare", c.Name, name))
			}
		}
	}
	return errors.Join(errs...)
}
