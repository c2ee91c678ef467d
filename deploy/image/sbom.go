package image

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// spdxDoc is the part of an SPDX 2.3 JSON document skewgate writes.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string       `json:"name"`
	SPDXID                string       `json:"SPDXID"`
	VersionInfo           string       `json:"versionInfo,omitempty"`
	DownloadLocation      string       `json:"downloadLocation"`
	FilesAnalyzed         bool         `json:"filesAnalyzed"`
	LicenseConcluded      string       `json:"licenseConcluded"`
	LicenseDeclared       string       `json:"licenseDeclared"`
	CopyrightText         string       `json:"copyrightText"`
	PrimaryPackagePurpose string       `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExtRef `json:"externalRefs,omitempty"`
	Comment               string       `json:"comment,omitempty"`
}

type spdxSum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SPDX returns the SPDX 2.3 SBOM of the image index m, as JSON: the image
// (its index digest), the skewgate module at s.Version, the Go standard
// library and every module the binaries were built from, read from the
// build information Go embeds in them (debug/buildinfo), so it lists what
// was linked, not what go.mod mentions. Every field derives from the
// inputs (no random namespace, no clock): the same build gives the same
// document. It returns an error when a binary has no build information or
// the binaries disagree on their modules.
func SPDX(m Multi, repository string, s Spec) ([]byte, error) {
	digest, err := m.Index.Digest()
	if err != nil {
		return nil, err
	}
	var info *buildinfo.BuildInfo
	arches := make([]string, 0, len(m.Binaries))
	for arch := range m.Binaries {
		arches = append(arches, arch)
	}
	sort.Strings(arches)
	for _, arch := range arches {
		bi, err := buildinfo.ReadFile(m.Binaries[arch])
		if err != nil {
			return nil, fmt.Errorf("build information of %s: %w", m.Binaries[arch], err)
		}
		if info != nil && modules(info) != modules(bi) {
			return nil, fmt.Errorf("the %s binary links other modules than the %s one", arch, arches[0])
		}
		info = bi
	}
	if info == nil {
		return nil, fmt.Errorf("no binaries")
	}
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              repository + "-" + s.Version,
		DocumentNamespace: "https://github.com/skewgate/skewgate/spdx/" + repository + "-" + s.Version + "-" + digest.Hex,
		CreationInfo:      spdxCreation{Created: s.Created.UTC().Format(time.RFC3339), Creators: []string{"Tool: skewgate-deploy-image"}},
	}
	image := spdxPackage{Name: repository, SPDXID: "SPDXRef-Image", VersionInfo: s.Version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION", PrimaryPackagePurpose: "CONTAINER", Checksums: []spdxSum{{Algorithm: "SHA256", ChecksumValue: digest.Hex}},
		ExternalRefs: []spdxExtRef{purl(fmt.Sprintf("pkg:oci/%s@sha256%%3A%s?arch=%s", repository, digest.Hex, strings.Join(arches, ",")))},
		Comment:      "OCI image index for linux/" + strings.Join(arches, ", linux/") + ", revision " + s.Revision}
	main := goPackage("SPDXRef-Module-main", info.Main.Path, s.Version, "APPLICATION")
	main.LicenseDeclared = "Apache-2.0"
	stdlib := goPackage("SPDXRef-Module-stdlib", "stdlib", info.GoVersion, "LIBRARY")
	doc.Packages = append(doc.Packages, image, main, stdlib)
	doc.Relationships = []spdxRelationship{
		{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image"},
		{"SPDXRef-Image", "CONTAINS", main.SPDXID},
		{main.SPDXID, "DEPENDS_ON", stdlib.SPDXID},
	}
	for i, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		p := goPackage(fmt.Sprintf("SPDXRef-Module-%d", i), d.Path, d.Version, "LIBRARY")
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{main.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func goPackage(id, path, version, purpose string) spdxPackage {
	return spdxPackage{Name: path, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
		PrimaryPackagePurpose: purpose, ExternalRefs: []spdxExtRef{purl("pkg:golang/" + path + "@" + version)}}
}

func purl(locator string) spdxExtRef {
	return spdxExtRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// modules is bi's dependency list as one string, to compare two builds.
func modules(bi *buildinfo.BuildInfo) string {
	var b strings.Builder
	for _, d := range bi.Deps {
		fmt.Fprintf(&b, "%s@%s %s\n", d.Path, d.Version, d.Sum)
	}
	return b.String()
}
