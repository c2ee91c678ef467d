package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/transport"
)

// AuthenticationConfigMap is where kube-apiserver publishes its
// requestheader configuration (kube-system/extension-apiserver-authentication).
const AuthenticationConfigMap = "extension-apiserver-authentication"

// HeaderNames are the identity headers kube-apiserver trusts from a front
// proxy (--requestheader-username-headers, -uid-headers, -group-headers,
// -extra-headers-prefix). kube-apiserver takes the user from the first name
// present and unions groups across every group name, so every name must be
// stripped from clients; skewgate sets the first of each.
type HeaderNames struct {
	User, UID, Group, ExtraPrefix []string
}

// DefaultHeaderNames are kubeadm's.
func DefaultHeaderNames() HeaderNames {
	return HeaderNames{User: []string{"X-Remote-User"}, UID: []string{"X-Remote-Uid"},
		Group: []string{"X-Remote-Group"}, ExtraPrefix: []string{"X-Remote-Extra-"}}
}

// Validate reports a list skewgate needs but is empty.
func (n HeaderNames) Validate() []error {
	var errs []error
	for _, l := range []struct {
		flag  string
		names []string
	}{{"--requestheader-username-headers", n.User}, {"--requestheader-group-headers", n.Group}, {"--requestheader-extra-headers-prefix", n.ExtraPrefix}} {
		if len(l.names) == 0 || l.names[0] == "" {
			errs = append(errs, fmt.Errorf("%s: empty; kube-apiserver's value is needed to strip and set identity", l.flag))
		}
	}
	return errs
}

// Union is every name in n or o, n's first.
func (n HeaderNames) Union(o HeaderNames) HeaderNames {
	u := func(a, b []string) []string {
		out := slices.Clone(a)
		for _, s := range b {
			if !slices.ContainsFunc(out, func(x string) bool { return strings.EqualFold(x, s) }) {
				out = append(out, s)
			}
		}
		return out
	}
	return HeaderNames{User: u(n.User, o.User), UID: u(n.UID, o.UID), Group: u(n.Group, o.Group), ExtraPrefix: u(n.ExtraPrefix, o.ExtraPrefix)}
}

// trusts reports whether kube-apiserver would read header key as identity.
func (n HeaderNames) trusts(key string) bool {
	for _, list := range [][]string{n.User, n.UID, n.Group} {
		if slices.ContainsFunc(list, func(name string) bool { return strings.EqualFold(name, key) }) {
			return true
		}
	}
	return slices.ContainsFunc(n.ExtraPrefix, func(p string) bool {
		return p != "" && len(key) >= len(p) && strings.EqualFold(key[:len(p)], p)
	})
}

// strip removes every identity header (all values) and the peer mark.
func (n HeaderNames) strip(h http.Header) {
	for k := range h {
		if n.trusts(k) || strings.EqualFold(k, PeerProxiedHeader) {
			delete(h, k)
		}
	}
}

// set writes u under the first name of each kind, escaped as client-go's
// auth-proxy round tripper escapes extra keys.
func (n HeaderNames) set(h http.Header, u user.Info) {
	scratch := &http.Request{Header: http.Header{}}
	transport.SetAuthProxyHeaders(scratch, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	for k, v := range scratch.Header {
		switch {
		case k == "X-Remote-User":
			h[http.CanonicalHeaderKey(n.User[0])] = v
		case k == "X-Remote-Uid" && len(n.UID) > 0:
			h[http.CanonicalHeaderKey(n.UID[0])] = v
		case k == "X-Remote-Group":
			h[http.CanonicalHeaderKey(n.Group[0])] = v
		case strings.HasPrefix(k, "X-Remote-Extra-"):
			h[http.CanonicalHeaderKey(n.ExtraPrefix[0]+strings.TrimPrefix(k, "X-Remote-Extra-"))] = v
		}
	}
}

// HeaderNamesFromConfigMap reads the names kube-apiserver published.
func HeaderNamesFromConfigMap(cm *corev1.ConfigMap) (HeaderNames, error) {
	var n HeaderNames
	for key, dst := range map[string]*[]string{
		"requestheader-username-headers": &n.User, "requestheader-uid-headers": &n.UID,
		"requestheader-group-headers": &n.Group, "requestheader-extra-headers-prefix": &n.ExtraPrefix,
	} {
		v, ok := cm.Data[key]
		if !ok || v == "" {
			continue
		}
		if err := json.Unmarshal([]byte(v), dst); err != nil {
			return n, fmt.Errorf("%s/%s %s: %w", cm.Namespace, cm.Name, key, err)
		}
	}
	return n, nil
}
