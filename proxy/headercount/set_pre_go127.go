//go:build !go1.27

package headercount

import "net/http"

// Set does nothing: Go before 1.27 does not count header values.
func Set(*http.Server) {}
