package kit

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var overlays = []string{"dev", "prod"}

// objects is one built overlay, each object decoded into its API type.
type objects struct {
	workloads  []workload
	services   []*corev1.Service
	configMaps []*corev1.ConfigMap
	pvcs       []*corev1.PersistentVolumeClaim
	pdbs       []*policyv1.PodDisruptionBudget
	netpols    []*networkingv1.NetworkPolicy
	monitors   []*monitoringv1.ServiceMonitor
}

// decodeStrict decodes one object's YAML into its Go API type by apiVersion
// and kind, refusing unknown and duplicate fields (sigs.k8s.io/yaml
// UnmarshalStrict: the JSON field names the API server accepts) and kinds
// the kit does not ship.
func (o *objects) decodeStrict(doc []byte) error {
	var tm struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var dst any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict(doc, d); err != nil {
			return err
		}
		o.workloads = append(o.workloads, workload{name: d.Name, replicas: d.Spec.Replicas, pod: d.Spec.Template})
		return nil
	case "apps/v1 StatefulSet":
		ss := &appsv1.StatefulSet{}
		if err := yaml.UnmarshalStrict(doc, ss); err != nil {
			return err
		}
		w := workload{name: ss.Name, replicas: ss.Spec.Replicas, pod: ss.Spec.Template}
		for _, c := range ss.Spec.VolumeClaimTemplates {
			w.claims = append(w.claims, c.Name)
		}
		o.workloads = append(o.workloads, w)
		return nil
	case "v1 Service":
		s := &corev1.Service{}
		o.services, dst = append(o.services, s), s
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		o.configMaps, dst = append(o.configMaps, c), c
	case "v1 PersistentVolumeClaim":
		c := &corev1.PersistentVolumeClaim{}
		o.pvcs, dst = append(o.pvcs, c), c
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		o.pdbs, dst = append(o.pdbs, p), p
	case "networking.k8s.io/v1 NetworkPolicy":
		n := &networkingv1.NetworkPolicy{}
		o.netpols, dst = append(o.netpols, n), n
	case "monitoring.coreos.com/v1 ServiceMonitor":
		m := &monitoringv1.ServiceMonitor{}
		o.monitors, dst = append(o.monitors, m), m
	default:
		return fmt.Errorf("unexpected object %s %s (a Secret or an unknown kind)", tm.APIVersion, tm.Kind)
	}
	return yaml.UnmarshalStrict(doc, dst)
}

// workload is a Deployment or a StatefulSet: its name, replicas, pod
// template and (a StatefulSet's) volume claim templates by name.
type workload struct {
	name     string
	replicas *int32
	pod      corev1.PodTemplateSpec
	claims   []string
}

// durable reports whether the volume named name outlives the pod: a claim
// template or a PersistentVolumeClaim.
func (w workload) durable(name string) bool {
	if slices.Contains(w.claims, name) {
		return true
	}
	return slices.ContainsFunc(w.pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == name && v.PersistentVolumeClaim != nil
	})
}

// mountOf is the container's mount that holds path (the longest mount path
// above it), if any.
func mountOf(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	return best, best.Name != ""
}

// build runs kustomize (krusty, in process, kubectl's default load
// restrictions) over an overlay and decodes every object strictly.
func build(t *testing.T, overlay string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(deploy, "kube", "overlays", overlay))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	o := &objects{}
	for _, r := range rm.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := o.decodeStrict(doc); err != nil {
			t.Fatalf("%s: %s %s: %v", overlay, r.GetKind(), r.GetName(), err)
		}
	}
	return o
}

// TestStrictDecodeRefusesAnUnknownFieldAndASecret: the decoder the manifest
// tests rely on fails on a misspelt field and on a Secret in the kit.
func TestStrictDecodeRefusesAnUnknownFieldAndASecret(t *testing.T) {
	o := &objects{}
	bad := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n"
	if err := o.decodeStrict([]byte(bad)); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("misspelt field: %v", err)
	}
	if err := o.decodeStrict([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")); err == nil {
		t.Fatal("a Secret decoded")
	}
}

// TestKustomizeOverlaysDecodeStrictlyIntoKubernetesTypes builds every overlay
// and checks what the deploy kit promises of each Deployment's pods: a
// readiness probe on /healthz, a liveness probe, resource requests and
// limits, non-root with a read-only root file system and no privilege
// escalation, tokens and keys only from Secret references; a
// PodDisruptionBudget and a Service selecting the gateway pods; a
// NetworkPolicy over them; a ServiceMonitor scraping a "metrics" port that
// a selected Service has.
func TestKustomizeOverlaysDecodeStrictlyIntoKubernetesTypes(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			o := build(t, overlay)
			if len(o.workloads) != 2 || len(o.pdbs) == 0 || len(o.netpols) == 0 || len(o.monitors) == 0 || len(o.configMaps) == 0 {
				t.Fatalf("objects: %d workloads, %d PDBs, %d network policies, %d service monitors, %d config maps",
					len(o.workloads), len(o.pdbs), len(o.netpols), len(o.monitors), len(o.configMaps))
			}
			for _, d := range o.workloads {
				checkPods(t, d)
				podLabels := labels.Set(d.pod.Labels)
				if !selects(o.services, podLabels) {
					t.Errorf("%s: no Service selects its pods", d.name)
				}
				if !slices.ContainsFunc(o.netpols, func(n *networkingv1.NetworkPolicy) bool {
					return selectorOf(t, n.Spec.PodSelector.MatchLabels).Matches(podLabels)
				}) {
					t.Errorf("%s: no NetworkPolicy covers its pods", d.name)
				}
				if d.name == "fencegate-gateway" && !slices.ContainsFunc(o.pdbs, func(p *policyv1.PodDisruptionBudget) bool {
					return selectorOf(t, p.Spec.Selector.MatchLabels).Matches(podLabels) && p.Spec.MinAvailable != nil &&
						p.Spec.MinAvailable.IntValue() < int(*d.replicas)
				}) {
					t.Errorf("%s: no PodDisruptionBudget that a drain can satisfy (replicas %d)", d.name, *d.replicas)
				}
			}
			for _, m := range o.monitors {
				var ok bool
				for _, s := range o.services {
					if selectorOf(t, m.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) &&
						slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
						ok = true
					}
				}
				if !ok || len(m.Spec.Endpoints) == 0 || m.Spec.Endpoints[0].Port != "metrics" {
					t.Errorf("ServiceMonitor %s scrapes no Service's metrics port", m.Name)
				}
			}
		})
	}
}

func selectorOf(t *testing.T, m map[string]string) labels.Selector {
	t.Helper()
	if len(m) == 0 {
		t.Fatal("an empty selector selects everything")
	}
	return labels.SelectorFromSet(m)
}

func selects(svcs []*corev1.Service, pod labels.Set) bool {
	return slices.ContainsFunc(svcs, func(s *corev1.Service) bool {
		return len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(pod)
	})
}

func checkPods(t *testing.T, d workload) {
	t.Helper()
	spec := d.pod.Spec
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod not runAsNonRoot", d.name)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
			!slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s/%s: want a read-only root, no privilege escalation, all capabilities dropped", d.name, c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: resource requests and a memory limit are required", d.name, c.Name)
		}
		for _, e := range c.Env {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s/%s: env %s is not a Secret reference", d.name, c.Name, e.Name)
			}
		}
	}
	c := spec.Containers[0]
	r := c.ReadinessProbe
	if r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/healthz" || !hasPort(c, r.HTTPGet.Port.String()) {
		t.Errorf("%s: readiness must GET /healthz on a declared port: %+v", d.name, r)
	}
	if l := c.LivenessProbe; l == nil || l.HTTPGet == nil || !hasPort(c, l.HTTPGet.Port.String()) {
		t.Errorf("%s: liveness must GET a declared port: %+v", d.name, l)
	}
	for _, m := range c.VolumeMounts {
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) && !slices.Contains(d.claims, m.Name) {
			t.Errorf("%s: mount %s has no volume", d.name, m.Name)
		}
	}
}

func hasPort(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name })
}

// TestStateTheProcessesWriteIsOnDurableWritableVolumes: every path a
// process writes is on a volume that outlives its pod and is mounted
// writable: a gateway replica's data directory (its operator state,
// authority.json: modes in force, policy generation, revocations) and the
// directory of the trust bundle it fetches; the registry's data directory
// and its signing key's directory (a rotation writes the new key there). An
// emptyDir lost a replica's state at every restart, so a restart took an
// enforce -> shadow rollback without --break-glass; a key on a Secret mount
// made every rotation fail.
func TestStateTheProcessesWriteIsOnDurableWritableVolumes(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			o := build(t, overlay)
			var cfg map[string]string
			for _, c := range o.configMaps {
				if _, ok := c.Data["gateway.yaml"]; ok {
					cfg = c.Data
				}
			}
			paths := map[string][]string{} // workload -> the paths it writes
			for name, file := range map[string]string{"fencegate-gateway": "gateway.yaml", "fencegate-registry": "registry.yaml"} {
				var c struct {
					DataDir     string `json:"dataDir"`
					TrustBundle string `json:"trustBundle"`
					Registry    *struct {
						SigningKey string `json:"signingKey"`
					} `json:"registry"`
				}
				if err := yaml.Unmarshal([]byte(cfg[file]), &c); err != nil || c.DataDir == "" {
					t.Fatalf("%s: %v (dataDir %q)", file, err, c.DataDir)
				}
				paths[name] = append(paths[name], c.DataDir)
				if name == "fencegate-gateway" {
					paths[name] = append(paths[name], filepath.Dir(c.TrustBundle))
				}
				if c.Registry != nil && c.Registry.SigningKey != "" {
					paths[name] = append(paths[name], filepath.Dir(c.Registry.SigningKey))
				}
			}
			for _, w := range o.workloads {
				for _, p := range paths[w.name] {
					m, ok := mountOf(w.pod.Spec.Containers[0], p)
					switch {
					case !ok:
						t.Errorf("%s: %s is on no volume (the read-only root)", w.name, p)
					case m.ReadOnly:
						t.Errorf("%s: %s is on a read-only mount (%s)", w.name, p, m.Name)
					case !w.durable(m.Name):
						t.Errorf("%s: %s is on volume %s, which does not outlive the pod", w.name, p, m.Name)
					}
				}
				delete(paths, w.name)
			}
			if len(paths) != 0 {
				t.Errorf("no workload for %v", paths)
			}
		})
	}
}
