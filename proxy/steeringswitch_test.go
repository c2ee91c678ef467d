package proxy

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// rollback-grace-until takes one instant every node reads alike; anything
// else is no override, never a held breath on a typo.
func TestGraceOverrideKey(t *testing.T) {
	at := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		cm    *corev1.ConfigMap
		want  time.Time
		fails bool
	}{
		{"no ConfigMap", nil, time.Time{}, false},
		{"no key", &corev1.ConfigMap{Data: map[string]string{SwitchKey: "auto"}}, time.Time{}, false},
		{"empty: removed", &corev1.ConfigMap{Data: map[string]string{GraceKey: ""}}, time.Time{}, false},
		{"UTC", &corev1.ConfigMap{Data: map[string]string{GraceKey: "2026-03-01T03:04:05Z"}}, at, false},
		{"offset", &corev1.ConfigMap{Data: map[string]string{GraceKey: "2026-03-01T04:04:05+01:00"}}, at, false},
		{"a verb", &corev1.ConfigMap{Data: map[string]string{GraceKey: "end"}}, time.Time{}, true},
		{"a duration", &corev1.ConfigMap{Data: map[string]string{GraceKey: "10m"}}, time.Time{}, true},
	} {
		got, err := graceOverride(tc.cm)
		if !got.Equal(tc.want) || (err != nil) != tc.fails {
			t.Errorf("%s: %v, %v; want %v (error: %t)", tc.name, got, err, tc.want, tc.fails)
		}
	}
}
