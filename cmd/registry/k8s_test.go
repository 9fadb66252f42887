package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"go.yaml.in/yaml/v2"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry"
)

// k8sObject is the part of a Kubernetes manifest the test reads.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas    *int             `yaml:"replicas"`
		Selector    k8sSelector      `yaml:"selector"` // Deployment, PodDisruptionBudget; Service: a plain map
		Ports       []k8sServicePort `yaml:"ports"`
		Template    k8sPodTemplate   `yaml:"template"` // Deployment, Job
		Schedule    string           `yaml:"schedule"` // CronJob
		JobTemplate struct {
			Spec struct {
				Template k8sPodTemplate `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	} `yaml:"spec"`
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		Containers []k8sContainer `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

// k8sSelector is a Deployment's {matchLabels: ...} or a Service's plain
// label map.
type k8sSelector map[string]any

func (s k8sSelector) labels() map[string]string {
	m := map[string]string{}
	src := map[any]any{}
	if ml, ok := s["matchLabels"].(map[any]any); ok {
		src = ml
	} else {
		for k, v := range s {
			src[k] = v
		}
	}
	for k, v := range src {
		ks, _ := k.(string)
		vs, _ := v.(string)
		m[ks] = vs
	}
	return m
}

type k8sServicePort struct {
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type k8sContainer struct {
	ReadinessProbe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// k8sObjects decodes every document of the manifests under configs/k8s.
func k8sObjects(t *testing.T) map[string]k8sObject {
	t.Helper()
	paths, err := filepath.Glob("../../configs/k8s/*.yml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifest under configs/k8s (%v)", err)
	}
	out := map[string]k8sObject{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name: %+v", p, o)
			}
			out[o.Kind] = o
		}
	}
	return out
}

func containsLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return len(want) > 0
}

// TestKubernetesExample checks configs/k8s: a Deployment of several
// replicas that runs `serve` on the config the ConfigMap holds, with the
// secrets in the environment; that config loads with the registry's own
// loader and passes the reclaim check, on S3 and a highly available
// Redis; the Service reaches the pods' port.
func TestKubernetesExample(t *testing.T) {
	objs := k8sObjects(t)
	cm, dep, svc := objs["ConfigMap"], objs["Deployment"], objs["Service"]
	if cm.Kind == "" || dep.Kind == "" || svc.Kind == "" {
		t.Fatalf("configs/k8s needs a ConfigMap, a Deployment and a Service; found %v", keys(objs))
	}
	if r := dep.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("Deployment %s: replicas not set or below 2, want several instances", dep.Metadata.Name)
	}
	pod := dep.Spec.Template.Metadata.Labels
	if !containsLabels(pod, dep.Spec.Selector.labels()) {
		t.Errorf("Deployment selector %v does not match the pod labels %v", dep.Spec.Selector.labels(), pod)
	}
	c := container(t, dep.Spec.Template, "registry")
	if len(c.Args) != 2 || c.Args[0] != "serve" {
		t.Fatalf("container args %q, want [serve <config>]", c.Args)
	}
	conf := loadMountedConfig(t, dep.Spec.Template, c, c.Args[1], cm)
	if conf.HTTP.Secret == "" {
		t.Error("no http.secret (nor REGISTRY_HTTP_SECRET): every replica would sign uploads with its own random secret")
	}
	if conf.Storage.Type() != "s3" || conf.Storage.Parameters()["accesskey"] != "from-secret-s3-accesskey" {
		t.Errorf("storage %q %v: want s3 with the access key from the Secret", conf.Storage.Type(), conf.Storage.Parameters()["accesskey"])
	}
	if !isLoopbackAddr(conf.HTTP.Debug.Addr) {
		t.Errorf("http.debug.addr %q: not loopback", conf.HTTP.Debug.Addr)
	}
	o, on, err := config.Load(conf)
	if err != nil || !on {
		t.Fatalf("reclaim check: on=%v %v", on, err)
	}
	if o.Redis.MasterName == "" && len(o.Redis.Addrs) < 2 {
		t.Errorf("reclaim's Redis %v: want Sentinel (mastername) or a Cluster's seed nodes", o.Redis.Addrs)
	}
	if o.Redis.Password == "" {
		t.Error("reclaim's Redis has no password: REGISTRY_REDIS_PASSWORD did not reach it")
	}
	if !o.GC.Enabled || !o.Reclaimer.Enabled {
		t.Errorf("gc.enabled=%v reclaimer.enabled=%v: the example runs both", o.GC.Enabled, o.Reclaimer.Enabled)
	}
	checkService(t, svc, pod, c, conf.HTTP.Addr)
	if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != registry.ReadyPath || p.Port != "http" {
		t.Errorf("readinessProbe %+v: want GET %s on the registry port, which fails while Redis does", p, registry.ReadyPath)
	}
}

// container returns the pod template's container of that name.
func container(t *testing.T, pod k8sPodTemplate, name string) k8sContainer {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in the pod template", name)
	return k8sContainer{}
}

// loadMountedConfig loads, with the registry's own loader, the config file
// at file in the container, with the container's secrets in the
// environment (each set to "from-secret-<key>").
func loadMountedConfig(t *testing.T, pod k8sPodTemplate, c k8sContainer, file string, cm k8sObject) *configuration.Configuration {
	t.Helper()
	raw := fileFromMount(t, pod, c, file, cm)
	confPath := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(confPath, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	shippedConfigs(t) // clears the test environment's REGISTRY_* overrides
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("env %s: not from a Secret", e.Name)
			continue
		}
		t.Setenv(e.Name, "from-secret-"+e.ValueFrom.SecretKeyRef.Key)
	}
	conf, err := readConfig(confPath)
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Metadata.Name, err)
	}
	return conf
}

// fileFromMount returns the file the container reads at file: the
// ConfigMap key mounted at that path.
func fileFromMount(t *testing.T, pod k8sPodTemplate, c k8sContainer, file string, cm k8sObject) string {
	t.Helper()
	volumes := map[string]string{} // volume -> ConfigMap
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			volumes[v.Name] = v.ConfigMap.Name
		}
	}
	for _, m := range c.VolumeMounts {
		key := m.SubPath
		if key == "" {
			key = strings.TrimPrefix(file, m.MountPath+"/")
		}
		if (m.MountPath == file || path.Dir(file) == m.MountPath) && volumes[m.Name] == cm.Metadata.Name {
			raw, ok := cm.Data[key]
			if !ok {
				t.Fatalf("ConfigMap %s has no key %q (mounted at %s)", cm.Metadata.Name, key, m.MountPath)
			}
			return raw
		}
	}
	t.Fatalf("%s is not mounted from ConfigMap %s", file, cm.Metadata.Name)
	return ""
}

// TestKubernetesMetricsSidecar: Prometheus can scrape the pod's metrics
// without reaching pprof. The sidecar's nginx forwards /metrics of the
// registry's loopback debug listener and answers 404 to anything else,
// on the port the pod's scrape annotation names.
func TestKubernetesMetricsSidecar(t *testing.T) {
	objs := k8sObjects(t)
	cm, dep := objs["ConfigMap"], objs["Deployment"]
	reg := container(t, dep.Spec.Template, "registry")
	conf := loadMountedConfig(t, dep.Spec.Template, reg, reg.Args[1], cm)
	side := container(t, dep.Spec.Template, "metrics-proxy")
	if len(side.Ports) != 1 {
		t.Fatalf("metrics-proxy: want one port, got %d", len(side.Ports))
	}
	port := strconv.Itoa(side.Ports[0].ContainerPort)
	if a := dep.Spec.Template.Metadata.Annotations; a["prometheus.io/port"] != port || a["prometheus.io/path"] != conf.HTTP.Debug.Prometheus.Path {
		t.Errorf("scrape annotations %v, want port %s and path %s", a, port, conf.HTTP.Debug.Prometheus.Path)
	}
	// white space folded: one line per directive is not the test's business
	nginx := strings.Join(strings.Fields(fileFromMount(t, dep.Spec.Template, side, "/etc/nginx/conf.d/default.conf", cm)), " ")
	want := []string{
		"listen " + port + ";",
		"location = " + conf.HTTP.Debug.Prometheus.Path + " {",
		"proxy_pass http://" + conf.HTTP.Debug.Addr + conf.HTTP.Debug.Prometheus.Path + ";",
		"location / { return 404; }",
	}
	for _, w := range want {
		if !strings.Contains(nginx, w) {
			t.Errorf("metrics-proxy.conf lacks %q: %s", w, nginx)
		}
	}
	if n := strings.Count(nginx, "proxy_pass"); n != 1 {
		t.Errorf("metrics-proxy.conf forwards %d locations, want only the metrics path", n)
	}
}

// TestKubernetesJobs: the in-use CronJob refreshes its source more often
// than retention's inusemaxage lets it age, and the rebuild Job runs
// `linkdb rebuild` on the registry's own config.
func TestKubernetesJobs(t *testing.T) {
	objs := k8sObjects(t)
	cm, dep, cron, job := objs["ConfigMap"], objs["Deployment"], objs["CronJob"], objs["Job"]
	if cron.Kind == "" || job.Kind == "" {
		t.Fatalf("configs/k8s needs the in-use CronJob and the rebuild Job; found %v", keys(objs))
	}
	reg := container(t, dep.Spec.Template, "registry")
	o, _, err := config.Load(loadMountedConfig(t, dep.Spec.Template, reg, reg.Args[1], cm))
	if err != nil {
		t.Fatal(err)
	}
	// The schedule is "M */H * * *": every H hours.
	f := strings.Fields(cron.Spec.Schedule)
	every, err := strconv.Atoi(strings.TrimPrefix(f[1], "*/"))
	if len(f) != 5 || err != nil || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		t.Fatalf("CronJob schedule %q: want \"M */H * * *\"", cron.Spec.Schedule)
	}
	if period := time.Duration(every) * time.Hour; 2*period > o.Retention.InUseMaxAge {
		t.Errorf("CronJob every %v, inusemaxage %v: one failed run would leave the index stale", period, o.Retention.InUseMaxAge)
	}
	scan := container(t, cron.Spec.JobTemplate.Spec.Template, "scan")
	if len(scan.Args) < 3 || scan.Args[0] != "inuse" || scan.Args[1] != "scan" || !slices.Contains(scan.Args, "--source") {
		t.Errorf("CronJob args %q, want inuse scan ... --source NAME", scan.Args)
	}
	rb := container(t, job.Spec.Template, "rebuild")
	if len(rb.Args) < 3 || rb.Args[0] != "linkdb" || rb.Args[1] != "rebuild" {
		t.Fatalf("Job args %q, want linkdb rebuild <config>", rb.Args)
	}
	jobConf := loadMountedConfig(t, job.Spec.Template, rb, rb.Args[2], cm)
	if jobConf.Storage.Type() != "s3" || jobConf.Storage.Parameters()["accesskey"] != "from-secret-s3-accesskey" {
		t.Errorf("the rebuild Job's storage %q: want the registry's S3 bucket with its key", jobConf.Storage.Type())
	}
}

// checkService: the Service selects the pods and targets the port the
// registry listens on.
func checkService(t *testing.T, svc k8sObject, pod map[string]string, c k8sContainer, httpAddr string) {
	t.Helper()
	if !containsLabels(pod, svc.Spec.Selector.labels()) {
		t.Errorf("Service selector %v does not match the pod labels %v", svc.Spec.Selector.labels(), pod)
	}
	_, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		t.Fatalf("http.addr %q: %v", httpAddr, err)
	}
	for _, p := range c.Ports {
		if port != strconv.Itoa(p.ContainerPort) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.TargetPort == p.Name || sp.TargetPort == port {
				return
			}
		}
	}
	t.Errorf("no Service port targets the container port of http.addr %s", httpAddr)
}

func keys(m map[string]k8sObject) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
