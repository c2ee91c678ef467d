package lab

import (
	"testing"

	"golang.org/x/mod/modfile"
)

func TestPickToolchain(t *testing.T) {
	for _, tc := range []struct {
		need, local, want string
		err               bool
	}{
		{"", "go1.26.8", "", false},
		{"1.24", "go1.26.8", "", false},
		{"1.26.0", "go1.26.8", "", false},
		{"1.27.0", "go1.26.8", NewerGoToolchain, false},
		{"1.27.0", "go1.27.3", "", false},
		{"1.28", "go1.26.8", "", true},
	} {
		var need *modfile.Go
		if tc.need != "" {
			need = &modfile.Go{Version: tc.need}
		}
		got, err := pickToolchain(need, tc.local)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("go %s on %s: %q %v, want %q (error %t)", tc.need, tc.local, got, err, tc.want, tc.err)
		}
	}
}
