package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// ErrUnknownVersion is returned (wrapped) for a version no skewgate of the
// cluster saw a kube-apiserver run.
var ErrUnknownVersion = errors.New("unknown version")

// Builtin is what a kube-apiserver of one version serves by itself, as a
// skewgate of the cluster read it from a server of that version: nothing
// is compiled into skewgate, so any version the cluster ran is known.
type Builtin struct {
	// Minor is the version asked for, e.g. "v1.35" or "v1.35.4".
	Minor string
	// RecordedFrom is the build it was read from, e.g. "v1.35.4", and
	// Recording from which server, when.
	RecordedFrom, Recording string
	types                   map[schema.GroupVersionResource]bool
}

// ReadReleases reads what each version served from every node's
// skewgate (/debug/routes' releases, kept in each one's state file
// across restarts), the newest read of each version. A node that cannot
// be read is an error of its own; the others still count.
func ReadReleases(ctx context.Context, c *Cluster, nodes []Node) ([]membership.Release, []error) {
	byVersion := map[string]membership.Release{}
	var errs []error
	for _, n := range nodes {
		body, _, err := get(ctx, c.Admin, n.Admin+"/debug/routes", nil)
		var v admin.RoutesView
		if err == nil {
			err = json.Unmarshal(body, &v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
			continue
		}
		for _, r := range v.Releases {
			if prev, ok := byVersion[r.Version]; !ok || r.Read.After(prev.Read) {
				byVersion[r.Version] = r
			}
		}
	}
	out := make([]membership.Release, 0, len(byVersion))
	for _, r := range byVersion {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b membership.Release) int { return compareVersions(a.Version, b.Version) })
	return out, errs
}

// TargetOf is the release asked for ("v1.35.4", "1.35", "v1.38.0-beta.0")
// among those recorded: that build if recorded, else the newest recorded
// build of its minor (a patch release adds or removes no API). A version
// of a minor no server of the cluster ran is ErrUnknownVersion, naming
// the versions known.
func TargetOf(asked string, releases []membership.Release) (*Builtin, error) {
	want, err := parseVersion(asked)
	if err != nil {
		return nil, fmt.Errorf("%w %q: want v<major>.<minor>[.<patch>]; known: %s", ErrUnknownVersion, asked, known(releases))
	}
	var pick *membership.Release
	for i, r := range releases {
		have, err := parseVersion(r.Version)
		if err != nil || have.Major() != want.Major() || have.Minor() != want.Minor() {
			continue
		}
		if r.Version == asked || "v"+strings.TrimPrefix(asked, "v") == r.Version {
			pick = &releases[i]
			break
		}
		if pick == nil || compareVersions(r.Version, pick.Version) > 0 {
			pick = &releases[i]
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("%w %s: no skewgate of this cluster saw a kube-apiserver of v%d.%d run; known: %s", ErrUnknownVersion, asked, want.Major(), want.Minor(), known(releases))
	}
	b := &Builtin{Minor: asked, RecordedFrom: pick.Version, types: map[schema.GroupVersionResource]bool{},
		Recording: fmt.Sprintf("read from %s at %s", pick.Server, pick.Read.UTC().Format("2006-01-02T15:04:05Z"))}
	for _, s := range pick.Types {
		gvr, ok := parseGVR(s)
		if !ok {
			return nil, fmt.Errorf("release %s: bad type %q", pick.Version, s)
		}
		b.types[gvr] = true
	}
	return b, nil
}

// CheckVersion says whether asked reads as a version (its release is
// looked up in the cluster later): ErrUnknownVersion if not.
func CheckVersion(asked string) error {
	if _, err := parseVersion(asked); err != nil {
		return fmt.Errorf("%w %q: want v<major>.<minor>[.<patch>]", ErrUnknownVersion, asked)
	}
	return nil
}

// parseVersion reads "v1.35.4", "1.35", "v1.38.0-beta.0".
func parseVersion(s string) (*version.Version, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.Trim(s, "v") == "" {
		return nil, errors.New("empty")
	}
	return version.ParseGeneric(s)
}

// compareVersions orders gitVersions semantically ("v1.38.0-beta.0"
// before "v1.38.0"), anything unparsable by its text.
func compareVersions(a, b string) int {
	if va, err := version.ParseSemantic(a); err == nil {
		if n, err := va.Compare(b); err == nil {
			return n
		}
	}
	return strings.Compare(a, b)
}

func known(releases []membership.Release) string {
	if len(releases) == 0 {
		return "none (no skewgate of the cluster read a kube-apiserver yet, or none could be reached)"
	}
	var out []string
	for _, r := range releases {
		out = append(out, r.Version)
	}
	return strings.Join(out, ", ")
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
func GVRString(gvr schema.GroupVersionResource) string { return membership.TypeString(gvr) }
