package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
)

// OpenAPIRoot is kube-apiserver's /openapi/v3 document: one entry per
// group-version path, each pointing at its schema with a content hash.
type OpenAPIRoot struct {
	Paths map[string]json.RawMessage `json:"paths"`
}

// errNoPaths marks a document that parses as JSON but is no OpenAPI root.
var errNoPaths = errors.New("no paths")

// ParseOpenAPIRoot parses a /openapi/v3 document; anything else (an error
// page, a lying peer) is an error.
func ParseOpenAPIRoot(data []byte) (*OpenAPIRoot, error) {
	var root OpenAPIRoot
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("openapi root: %w", err)
	}
	if root.Paths == nil {
		return nil, fmt.Errorf("openapi root: %w", errNoPaths)
	}
	return &root, nil
}

// MergeOpenAPIRoots merges /openapi/v3 documents, the local server's first:
// a path any server lists is in the result, and where several list it the
// earliest document's entry (its hash) wins, so a group-version the local
// server serves keeps pointing at the local schema. Clients (kubectl
// explain, client-go's OpenAPIV3) then find peer-only group-versions, whose
// /openapi/v3/apis/<g>/<v> skewgate routes to a capable peer. The same
// input gives the same bytes (encoding/json sorts map keys).
func MergeOpenAPIRoots(roots ...*OpenAPIRoot) []byte {
	merged := OpenAPIRoot{Paths: map[string]json.RawMessage{}}
	for _, root := range roots {
		for p, v := range root.Paths {
			if _, ok := merged.Paths[p]; !ok {
				merged.Paths[p] = v
			}
		}
	}
	out, _ := json.Marshal(merged) // raw messages parsed once already: cannot fail
	return out
}
