package plan

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The built-in types of each supported minor version, one
// "group/version/resource scope" a line, derived from the discovery
// skewgate recorded from real kube-apiservers
// (proxy/discovery/testdata/<version>-{api,apis}-v2.json; the first line
// names the build). TestBuiltinMatchesRecordings keeps them equal, and
// writes them with -update.
//
//go:embed builtin/*.txt
var builtinFiles embed.FS

// ErrUnknownVersion is returned (wrapped) for a version whose built-in
// types skewgate does not know.
var ErrUnknownVersion = errors.New("unknown version")

// Builtin is what a kube-apiserver of one version serves by itself.
type Builtin struct {
	// Minor is the version asked for, as "v1.35".
	Minor string
	// RecordedFrom is the build the list was recorded from, e.g.
	// "v1.35.4", and Recording how that server ran (its flags).
	RecordedFrom, Recording string
	types                   map[schema.GroupVersionResource]bool
}

// BuiltinTypes returns the built-in types of version ("v1.35.4", "1.35",
// "v1.35"): a minor version adds or removes APIs, a patch release does not.
// An unparsable or unrecorded version is ErrUnknownVersion, naming the
// versions skewgate knows.
func BuiltinTypes(version string) (*Builtin, error) {
	minor, ok := minorOf(version)
	if !ok {
		return nil, fmt.Errorf("%w %q: want v<major>.<minor>[.<patch>]; known: %s", ErrUnknownVersion, version, knownVersions())
	}
	data, err := builtinFiles.ReadFile("builtin/" + minor + ".txt")
	if err != nil {
		return nil, fmt.Errorf("%w %s: skewgate knows the built-in types of %s only", ErrUnknownVersion, minor, knownVersions())
	}
	return parseBuiltin(minor, string(data))
}

// minorOf turns "v1.35.4", "1.35" into "v1.35".
func minorOf(version string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(version), "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return "", false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	return "v" + parts[0] + "." + parts[1], true
}

func knownVersions() string {
	names, _ := fs.Glob(builtinFiles, "builtin/*.txt")
	var out []string
	for _, n := range names {
		minor := strings.TrimSuffix(path.Base(n), ".txt")
		if b, err := BuiltinTypesOf(minor); err == nil {
			out = append(out, minor+" (recorded from "+b.RecordedFrom+")")
		}
	}
	return strings.Join(out, ", ")
}

// BuiltinTypesOf is BuiltinTypes for an exact minor ("v1.35") without the
// list of known versions in its error.
func BuiltinTypesOf(minor string) (*Builtin, error) {
	data, err := builtinFiles.ReadFile("builtin/" + minor + ".txt")
	if err != nil {
		return nil, fmt.Errorf("%w %s", ErrUnknownVersion, minor)
	}
	return parseBuiltin(minor, string(data))
}

func parseBuiltin(minor, text string) (*Builtin, error) {
	b := &Builtin{Minor: minor, types: map[schema.GroupVersionResource]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if from, ok := strings.CutPrefix(line, "# recorded from "); ok && b.RecordedFrom == "" {
			build, how, _ := strings.Cut(from, " ")
			b.RecordedFrom, b.Recording = build, strings.TrimSuffix(strings.TrimPrefix(how, "("), ")")
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		gvr, ok := parseGVR(strings.Fields(line)[0])
		if !ok {
			return nil, fmt.Errorf("built-in types of %s: bad line %q", minor, line)
		}
		b.types[gvr] = true
	}
	return b, nil
}

// parseGVR reads "v1/pods" (the core group) or "apps/v1/deployments".
func parseGVR(s string) (schema.GroupVersionResource, bool) {
	p := strings.Split(s, "/")
	switch {
	case len(p) == 2 && p[0] != "" && p[1] != "":
		return schema.GroupVersionResource{Version: p[0], Resource: p[1]}, true
	case len(p) == 3 && p[0] != "" && p[1] != "" && p[2] != "":
		return schema.GroupVersionResource{Group: p[0], Version: p[1], Resource: p[2]}, true
	}
	return schema.GroupVersionResource{}, false
}

// Serves reports whether the version serves gvr.
func (b *Builtin) Serves(gvr schema.GroupVersionResource) bool { return b.types[gvr] }

// VersionsOf lists the versions in which the version serves group/resource:
// objects of a type it lacks in one version stay reachable in these.
func (b *Builtin) VersionsOf(gr schema.GroupResource) []string {
	var out []string
	for gvr := range b.types {
		if gvr.GroupResource() == gr {
			out = append(out, gvr.Version)
		}
	}
	slices.Sort(out)
	return out
}

// ServesGroup reports whether the version serves any version of group.
func (b *Builtin) ServesGroup(group string) bool {
	for gvr := range b.types {
		if gvr.Group == group {
			return true
		}
	}
	return false
}

// GVRString is "v1/pods" for the core group, "apps/v1/deployments" else.
func GVRString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}
