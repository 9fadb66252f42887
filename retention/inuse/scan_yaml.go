package inuse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Found is one image reference a workload names, and where.
type Found struct {
	// Image is the reference as written, after Kustomize overrides.
	Image string `json:"image"`
	// Where is "<file>:<line>", the line its YAML document starts at.
	Where string `json:"where"`
	// Object is "<Kind>/<name>", Field the container field
	// ("initContainers[0]").
	Object string `json:"object"`
	Field  string `json:"field"`
}

// document is one YAML document of a file and the line it starts at.
type document struct {
	body []byte
	line int
}

func isSeparator(ln []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(ln, "\r\n"), []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

var yamlLineRe = regexp.MustCompile(`line (\d+)`)

// parseError names the file and the absolute line of a document's error.
func parseError(file string, doc document, err error) error {
	line := doc.line
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		line += n - 1
	}
	return fmt.Errorf("%w: %s:%d: %s", ErrInvalid, file, line, strings.TrimPrefix(msg, "error converting YAML to JSON: "))
}

// object is the part of a Kubernetes object the scanner reads.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
	Spec  json.RawMessage   `json:"spec"`
}

type podSpec struct {
	Containers          []container `json:"containers"`
	InitContainers      []container `json:"initContainers"`
	EphemeralContainers []container `json:"ephemeralContainers"`
}

type container struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// ScanReader returns every image the workloads of the YAML stream r
// names: Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets,
// ReplicationControllers, Jobs and CronJobs, their containers, init and
// ephemeral containers, in multi-document streams and List kinds. Other
// kinds are skipped. A document that does not parse fails the whole
// stream with name:line: an unreadable stream never means "no images".
// It reads one document at a time, and fails (ErrTooLarge) past the
// limit.
func ScanReader(name string, r io.Reader, l Limits) ([]Found, error) {
	docs := newDocuments(l.reader(name, r))
	var out []Found
	for {
		doc, ok, err := docs.next()
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
		}
		if !ok {
			return out, nil
		}
		found, err := scanDocument(name, doc)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
}

// scanDocument returns the images of one document of file.
func scanDocument(file string, doc document) ([]Found, error) {
	j, err := yaml.YAMLToJSON(doc.body)
	if err != nil {
		return nil, parseError(file, doc, err)
	}
	if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
		return nil, nil // empty, or only comments
	}
	found, err := scanObject(j, fmt.Sprintf("%s:%d", file, doc.line))
	if err != nil {
		return nil, fmt.Errorf("%w: %s:%d: %v", ErrInvalid, file, doc.line, err)
	}
	return found, nil
}

// scanObject extracts the images of one object (recursing into a List).
func scanObject(j []byte, where string) ([]Found, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(j), []byte("{")) {
		return nil, nil // a scalar or a list at the top: not an object
	}
	var o object
	if err := json.Unmarshal(j, &o); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %v", err)
	}
	if strings.HasSuffix(o.Kind, "List") {
		var out []Found
		for i, it := range o.Items {
			found, err := scanObject(it, where)
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %v", i, err)
			}
			out = append(out, found...)
		}
		return out, nil
	}
	spec, path, err := podSpecOf(o)
	if err != nil || spec == nil {
		return nil, err
	}
	ref := o.Kind + "/" + o.Metadata.Name
	var out []Found
	for _, group := range []struct {
		field string
		cs    []container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}, {"ephemeralContainers", spec.EphemeralContainers}} {
		field := group.field
		for i, c := range group.cs {
			f := fmt.Sprintf("%s.%s[%d]", path, field, i)
			if c.Image == "" {
				return nil, fmt.Errorf("%s %s: no image", ref, f)
			}
			out = append(out, Found{Image: c.Image, Where: where, Object: ref, Field: f})
		}
	}
	return out, nil
}

// podSpecOf returns the pod spec a workload kind holds, and its path; nil
// for other kinds.
func podSpecOf(o object) (*podSpec, string, error) {
	var path []string
	switch o.Kind {
	case "Pod":
		path = []string{"spec"}
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job":
		path = []string{"spec", "template", "spec"}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
	default:
		return nil, "", nil
	}
	raw := o.Spec
	for _, step := range path[1:] {
		var m map[string]json.RawMessage
		if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
			return nil, "", fmt.Errorf("%s/%s: no %s", o.Kind, o.Metadata.Name, strings.Join(path, "."))
		}
		raw = m[step]
	}
	var spec podSpec
	if len(raw) == 0 || json.Unmarshal(raw, &spec) != nil {
		return nil, "", fmt.Errorf("%s/%s: no pod spec at %s", o.Kind, o.Metadata.Name, strings.Join(path, "."))
	}
	return &spec, strings.Join(path, "."), nil
}
