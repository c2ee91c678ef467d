// Package admintest fakes the part of an apiserver the secure admin
// listener delegates to, for tests.
package admintest

import (
	"encoding/json"
	"net/http"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// Reviewer answers TokenReviews and SubjectAccessReviews as an apiserver
// with RBAC would: Users maps tokens to user names, Allowed a user to the
// non-resource paths it may get.
type Reviewer struct {
	Users   map[string]string
	Allowed map[string][]string

	mu    sync.Mutex
	asked []string
}

// SetAllowed replaces the paths user may get, while the Reviewer serves.
func (rv *Reviewer) SetAllowed(user string, paths ...string) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.Allowed == nil {
		rv.Allowed = map[string][]string{}
	}
	rv.Allowed[user] = paths
}

// Asked is every SubjectAccessReview so far, as "user verb path".
func (rv *Reviewer) Asked() []string {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]string(nil), rv.asked...)
}

// ServeHTTP implements the two review APIs; anything else is a 404.
func (rv *Reviewer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if user, ok := rv.Users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
		}
		json.NewEncoder(w).Encode(tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if nr := sar.Spec.NonResourceAttributes; nr != nil {
			rv.mu.Lock()
			rv.asked = append(rv.asked, sar.Spec.User+" "+nr.Verb+" "+nr.Path)
			for _, p := range rv.Allowed[sar.Spec.User] {
				sar.Status.Allowed = sar.Status.Allowed || (nr.Verb == "get" && nr.Path == p)
			}
			rv.mu.Unlock()
		}
		json.NewEncoder(w).Encode(sar)
	default:
		http.NotFound(w, r)
	}
}
