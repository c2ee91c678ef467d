package proxy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestHeaderNamesFromConfigMap(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group","X-Lab-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		"requestheader-uid-headers":          ``, // older servers publish none
	}}
	n, err := HeaderNamesFromConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Group, []string{"X-Remote-Group", "X-Lab-Group"}) || !slices.Equal(n.User, []string{"X-Remote-User"}) || n.UID != nil {
		t.Errorf("names = %+v", n)
	}
	cm.Data["requestheader-group-headers"] = `X-Remote-Group`
	if _, err := HeaderNamesFromConfigMap(cm); err == nil {
		t.Error("a value that is not a JSON list was accepted")
	}
	if errs := (HeaderNames{User: []string{"X-Remote-User"}}).Validate(); len(errs) != 2 {
		t.Errorf("names without group headers or extra prefix: %v", errs)
	}
	u := DefaultHeaderNames().Union(HeaderNames{Group: []string{"x-remote-group", "X-Lab-Group"}})
	if !slices.Equal(u.Group, []string{"X-Remote-Group", "X-Lab-Group"}) {
		t.Errorf("union of groups = %v", u.Group)
	}
}
