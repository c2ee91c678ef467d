package release

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// In-toto and SLSA identifiers (in-toto Statement v1, SLSA Provenance v1).
const (
	statementType  = "https://in-toto.io/Statement/v1"
	provenanceType = "https://slsa.dev/provenance/v1"
	// buildType names this build's recipe: docs/release.md describes
	// its external and internal parameters.
	buildType = "https://github.com/skewgate/skewgate/blob/main/docs/release.md#provenance"
	sourceURI = "git+https://github.com/skewgate/skewgate"
)

type statement struct {
	Type          string     `json:"_type"`
	Subject       []subject  `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     provenance `json:"predicate"`
}

type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

type provenance struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   externalParameters   `json:"externalParameters"`
		InternalParameters   internalParameters   `json:"internalParameters"`
		ResolvedDependencies []resourceDescriptor `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
		Byproducts []resourceDescriptor `json:"byproducts,omitempty"`
	} `json:"runDetails"`
}

type externalParameters struct {
	Version    string             `json:"version"`
	Repository string             `json:"repository"`
	Source     resourceDescriptor `json:"source"`
}

type internalParameters struct {
	GoVersion  string   `json:"goVersion"`
	Package    string   `json:"package"`
	LDFlags    string   `json:"ldflags"`
	Arches     []string `json:"arches"`
	CGOEnabled bool     `json:"cgoEnabled"`
	Trimpath   bool     `json:"trimpath"`
}

type resourceDescriptor struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest"`
}

// provenanceStatement is the in-toto statement whose subject is the image
// index at digest and whose predicate is its SLSA v1 provenance: the
// commit it was built from, how (Go, flags, arches) and by whom
// (builderID); the SBOM as a byproduct. No clock: the same build gives
// the same statement.
func provenanceStatement(o Options, src source, digest v1.Hash, ldflags string, sbomSHA256 string) ([]byte, error) {
	var p provenance
	bd := &p.BuildDefinition
	bd.BuildType = buildType
	commit := map[string]string{"gitCommit": src.Commit}
	bd.ExternalParameters = externalParameters{Version: o.Version, Repository: o.Repository,
		Source: resourceDescriptor{URI: sourceURI + "@refs/tags/" + o.Version, Digest: commit}}
	bd.InternalParameters = internalParameters{GoVersion: runtime.Version(), Package: imagePackage, LDFlags: ldflags,
		Arches: arches(), Trimpath: true}
	bd.ResolvedDependencies = []resourceDescriptor{{URI: sourceURI, Digest: commit},
		{URI: "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go"), Digest: map[string]string{}}}
	p.RunDetails.Builder.ID = o.BuilderID
	p.RunDetails.Byproducts = []resourceDescriptor{{Name: sbomFile, Digest: map[string]string{"sha256": sbomSHA256}}}
	s := statement{Type: statementType, PredicateType: provenanceType, Predicate: p,
		Subject: []subject{{Name: o.Repository, Digest: map[string]string{"sha256": digest.Hex}}}}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	return append(out, '\n'), nil
}

// checkProvenance returns an error unless data is an in-toto statement of
// SLSA v1 provenance whose one subject is repository at digest, built at
// version.
func checkProvenance(data []byte, repository, version string, digest v1.Hash) error {
	var s statement
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	if s.Type != statementType || s.PredicateType != provenanceType {
		return fmt.Errorf("provenance: a %s of %s, want an in-toto v1 statement of SLSA v1 provenance", s.Type, s.PredicateType)
	}
	if len(s.Subject) != 1 || s.Subject[0].Name != repository || s.Subject[0].Digest["sha256"] != digest.Hex {
		return fmt.Errorf("provenance: subject %+v, want %s sha256:%s", s.Subject, repository, digest.Hex)
	}
	if v := s.Predicate.BuildDefinition.ExternalParameters.Version; v != version {
		return fmt.Errorf("provenance: version %s, want %s", v, version)
	}
	return nil
}
