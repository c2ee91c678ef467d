package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Summary is what a release directory holds.
type Summary struct {
	Version    string
	Repository string
	Digest     v1.Hash // the image index's
	Chart      string  // the chart's file
}

// Ref is the image as the release's manifests name it.
func (s Summary) Ref() string {
	return s.Repository + ":" + s.Version + "@" + s.Digest.String()
}

// Verify checks a release directory with the release's public key (PEM):
// SHA256SUMS lists every file with its SHA-256 and its signature verifies;
// the image signature verifies over a cosign payload naming the archive's
// image index digest and repository; the provenance's subject is that
// digest; every manifest (kustomize, static pod) runs only
// repository:version@digest; the chart's values and appVersion name it and
// index.yaml lists the chart with its SHA-256. It returns the first
// failure.
func Verify(dir string, publicKey []byte) (Summary, error) {
	pub, err := ParsePublicKey(publicKey)
	if err != nil {
		return Summary{}, err
	}
	read := func(f string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, f)) }
	sums, err := read(SumsFile)
	if err != nil {
		return Summary{}, err
	}
	sumsSig, err := read(SumsSigFile)
	if err != nil {
		return Summary{}, err
	}
	if err := VerifyBlob(pub, sums, sumsSig); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", SumsSigFile, err)
	}
	if err := checkSums(dir, sums); err != nil {
		return Summary{}, err
	}
	s, err := readArchive(filepath.Join(dir, ImageFile))
	if err != nil {
		return Summary{}, err
	}
	if err := checkSignature(pub, s, read); err != nil {
		return Summary{}, err
	}
	prov, err := read(ProvenanceFile)
	if err != nil {
		return Summary{}, err
	}
	if err := checkProvenance(prov, s.Repository, s.Version, s.Digest); err != nil {
		return Summary{}, err
	}
	files := append([]string{staticPodFile}, keys(manifests)...)
	for _, f := range files {
		data, err := read(f)
		if err != nil {
			return Summary{}, err
		}
		if err := checkImages(f, data, s.Ref()); err != nil {
			return Summary{}, err
		}
	}
	s.Chart = "skewgate-" + chartVersion(s.Version) + ".tgz"
	if err := checkChart(dir, s); err != nil {
		return Summary{}, err
	}
	return s, nil
}

func checkSignature(pub *ecdsa.PublicKey, s Summary, read func(string) ([]byte, error)) error {
	payload, err := read(PayloadFile)
	if err != nil {
		return err
	}
	sig, err := read(SignatureFile)
	if err != nil {
		return err
	}
	if err := VerifyBlob(pub, payload, sig); err != nil {
		return fmt.Errorf("%s: %w", SignatureFile, err)
	}
	repo, digest, err := parsePayload(payload)
	if err != nil {
		return err
	}
	if repo != s.Repository || digest != s.Digest.String() {
		return fmt.Errorf("%s signs %s@%s, the archive is %s@%s", PayloadFile, repo, digest, s.Repository, s.Digest)
	}
	return nil
}

// readArchive returns the repository, version and digest of the image
// index an OCI archive (image.WriteIndexArchive's) holds, after checking
// that the index's blob is there with that digest.
func readArchive(path string) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	blobs := map[string]bool{}
	var index []byte
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Summary{}, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Name == "index.json" {
			if index, err = io.ReadAll(tr); err != nil {
				return Summary{}, err
			}
			continue
		}
		if hex, ok := strings.CutPrefix(hdr.Name, "blobs/sha256/"); ok && hex != "" {
			h, _, err := v1.SHA256(tr)
			if err != nil {
				return Summary{}, err
			}
			blobs[hex] = h.Hex == hex
		}
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(index, &idx); err != nil {
		return Summary{}, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(idx.Manifests) != 1 {
		return Summary{}, fmt.Errorf("%s: index.json lists %d images, want 1", path, len(idx.Manifests))
	}
	d := idx.Manifests[0]
	if ok, there := blobs[d.Digest.Hex]; !there || !ok {
		return Summary{}, fmt.Errorf("%s: the image index %s is missing or does not match its digest", path, d.Digest)
	}
	tag, err := name.NewTag(d.Annotations["io.containerd.image.name"], name.StrictValidation)
	if err != nil {
		return Summary{}, fmt.Errorf("%s: the image's name: %w", path, err)
	}
	return Summary{Version: tag.TagStr(), Repository: tag.Repository.Name(), Digest: d.Digest}, nil
}

// checkImages returns an error unless every container of every workload
// in the manifests data runs ref, and there is at least one.
func checkImages(file string, data []byte, ref string) error {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	n := 0
	for {
		var obj struct {
			Kind string `json:"kind"`
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		spec, err := podSpec(obj.Kind, raw)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if spec == nil {
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if c.Image != ref {
				return fmt.Errorf("%s: %s container %s runs %s, want %s", file, obj.Kind, c.Name, c.Image, ref)
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: no container", file)
	}
	return nil
}

// podSpec is the pod spec of a DaemonSet, Job or Pod; nil for other kinds.
func podSpec(kind string, raw []byte) (*corev1.PodSpec, error) {
	switch kind {
	case "DaemonSet":
		var o appsv1.DaemonSet
		err := json.Unmarshal(raw, &o)
		return &o.Spec.Template.Spec, err
	case "Job":
		var o batchv1.Job
		err := json.Unmarshal(raw, &o)
		return &o.Spec.Template.Spec, err
	case "Pod":
		var o corev1.Pod
		err := json.Unmarshal(raw, &o)
		return &o.Spec, err
	case "Deployment", "StatefulSet", "CronJob", "ReplicaSet":
		return nil, fmt.Errorf("a %s: the release checks no workload of that kind", kind)
	}
	return nil, nil
}

// checkChart returns an error unless the packaged chart's values name the
// release's image by repository, tag and digest, its appVersion is the
// release, and index.yaml lists it with its SHA-256.
func checkChart(dir string, s Summary) error {
	path := filepath.Join(dir, s.Chart)
	files, err := chartFiles(path, "skewgate/values.yaml", "skewgate/Chart.yaml")
	if err != nil {
		return err
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string } `json:"image"`
	}
	if err := yaml.Unmarshal(files["skewgate/values.yaml"], &values); err != nil {
		return fmt.Errorf("%s: values.yaml: %w", s.Chart, err)
	}
	if got := values.Image; got.Repository != s.Repository || got.Tag != s.Version || got.Digest != s.Digest.String() {
		return fmt.Errorf("%s: values image %+v, want %s", s.Chart, got, s.Ref())
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(files["skewgate/Chart.yaml"], &chart); err != nil {
		return fmt.Errorf("%s: Chart.yaml: %w", s.Chart, err)
	}
	if chart.AppVersion != s.Version || chart.Version != chartVersion(s.Version) {
		return fmt.Errorf("%s: version %s, appVersion %s, want %s and %s", s.Chart, chart.Version, chart.AppVersion, chartVersion(s.Version), s.Version)
	}
	var index struct {
		Entries map[string][]struct {
			Version string   `json:"version"`
			Digest  string   `json:"digest"`
			URLs    []string `json:"urls"`
		} `json:"entries"`
	}
	data, err := os.ReadFile(filepath.Join(dir, chartIndexFile))
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, &index); err != nil {
		return fmt.Errorf("%s: %w", chartIndexFile, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	for _, e := range index.Entries["skewgate"] {
		if e.Version == chart.Version && e.Digest == sum {
			return nil
		}
	}
	return fmt.Errorf("%s lists no skewgate %s with digest %s", chartIndexFile, chart.Version, sum)
}

// chartFiles returns the named files of a chart archive.
func chartFiles(path string, names ...string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, n := range names {
			if hdr.Name == n {
				if out[n], err = io.ReadAll(tr); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, n := range names {
		if out[n] == nil {
			return nil, fmt.Errorf("%s: no %s", path, n)
		}
	}
	return out, nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
