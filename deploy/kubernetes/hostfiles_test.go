// Package kubernetes_test checks what deploy/kubernetes gives the pod from
// the host: exactly the files skewgate reads, and the table of them in
// docs/deploy.md. It renders the manifests as `kubectl apply -k` does.
package kubernetes_test

import (
	"fmt"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// pkiDir is kubeadm's certificate directory on a control-plane node.
const pkiDir = "/etc/kubernetes/pki"

// kubeadmPKI is what kubeadm init writes to pkiDir (kubeadm's "PKI
// certificates and requirements"; `kubeadm certs check-expiration` lists
// the certificates): whatever skewgate does not name in a flag must stay
// out of the pod.
var kubeadmPKI = []string{
	"ca.crt", "ca.key", "sa.key", "sa.pub",
	"apiserver.crt", "apiserver.key",
	"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
	"apiserver-etcd-client.crt", "apiserver-etcd-client.key",
	"front-proxy-ca.crt", "front-proxy-ca.key",
	"front-proxy-client.crt", "front-proxy-client.key",
	"etcd/ca.crt", "etcd/ca.key", "etcd/server.crt", "etcd/server.key",
	"etcd/peer.crt", "etcd/peer.key", "etcd/healthcheck-client.crt", "etcd/healthcheck-client.key",
}

// kustomizations are the directories operators apply (or render, for the
// uninstall Job).
var kustomizations = []string{".", "base", "monitoring", "uninstall"}

// podSpecs renders each kustomization and returns every pod template in
// it, by the directory and the object's kind and name.
func podSpecs(t *testing.T) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{}
	for _, dir := range kustomizations {
		rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		for _, r := range rm.Resources() {
			data, err := r.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			if spec, ok := podSpec(t, r.GetKind(), data); ok {
				specs[dir+": "+r.GetKind()+" "+r.GetName()] = spec
			}
		}
	}
	return specs
}

func podSpec(t *testing.T, kind string, data []byte) (corev1.PodSpec, bool) {
	t.Helper()
	switch kind {
	case "DaemonSet":
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(data, &ds); err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec, true
	case "Job":
		var j batchv1.Job
		if err := yaml.UnmarshalStrict(data, &j); err != nil {
			t.Fatal(err)
		}
		return j.Spec.Template.Spec, true
	}
	return corev1.PodSpec{}, false
}

// filesRead are the host files a container's flags name (--*-file=PATH).
func filesRead(c corev1.Container) []string {
	var files []string
	for _, a := range c.Args {
		name, value, ok := strings.Cut(a, "=")
		if ok && strings.HasPrefix(name, "--") && strings.HasSuffix(name, "-file") && value != "" {
			files = append(files, path.Clean(value))
		}
	}
	slices.Sort(files)
	return slices.Compact(files)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// hostMount is one hostPath volume as a container sees it.
type hostMount struct {
	host, typ, pod string
	readOnly       bool
}

func hostMounts(spec corev1.PodSpec, c corev1.Container) []hostMount {
	var ms []hostMount
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.HostPath == nil {
				continue
			}
			m := hostMount{host: path.Join(v.HostPath.Path, vm.SubPath), pod: vm.MountPath, readOnly: vm.ReadOnly}
			if v.HostPath.Type != nil {
				m.typ = string(*v.HostPath.Type)
			}
			ms = append(ms, m)
		}
	}
	return ms
}

// TestOnlyTheFilesItReads: no pod the manifests create can read a file of
// kubeadm's pki that its flags do not name.
func TestOnlyTheFilesItReads(t *testing.T) {
	specs := podSpecs(t)
	if len(specs) < 4 {
		t.Fatalf("rendered pod templates %v: want the DaemonSet of ., base and monitoring, and the uninstall Job", slices.Collect(maps.Keys(specs)))
	}
	for where, spec := range specs {
		for _, v := range violations(spec) {
			t.Errorf("%s: %s", where, v)
		}
	}
}

// violations: each pki file a container reads is a read-only hostPath of
// type File at the path its flag names; no hostPath holds the pki
// directory or a directory above it, nor a pki file no flag names.
func violations(spec corev1.PodSpec) []string {
	var vs []string
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		reads := filesRead(c)
		var mounted []string
		for _, m := range hostMounts(spec, c) {
			if within(pkiDir, m.host) {
				vs = append(vs, fmt.Sprintf("container %s mounts %s: every file of %s with it", c.Name, m.host, pkiDir))
				continue
			}
			if !within(m.host, pkiDir) {
				continue
			}
			if !slices.Contains(reads, m.host) {
				vs = append(vs, fmt.Sprintf("container %s mounts %s, which no flag of it names (it reads %v)", c.Name, m.host, reads))
			}
			if m.typ != string(corev1.HostPathFile) || !m.readOnly || m.pod != m.host {
				vs = append(vs, fmt.Sprintf("container %s mounts %s as type %q, read-only %t, at %s: want type File, read-only, at the same path", c.Name, m.host, m.typ, m.readOnly, m.pod))
			}
			mounted = append(mounted, m.host)
		}
		for _, f := range reads {
			if within(f, pkiDir) && !slices.Contains(mounted, f) {
				vs = append(vs, fmt.Sprintf("container %s reads %s, which is not mounted as a file of its own", c.Name, f))
			}
		}
		for _, f := range kubeadmPKI {
			f = path.Join(pkiDir, f)
			if slices.Contains(reads, f) {
				continue
			}
			for _, m := range hostMounts(spec, c) {
				if within(f, m.host) {
					vs = append(vs, fmt.Sprintf("container %s can read %s through hostPath %s", c.Name, f, m.host))
				}
			}
		}
	}
	return vs
}

// TestTheCheckHasTeeth: the check fails for the manifest as it was (the
// whole pki directory), a directory above it, a key no flag names, and a
// named file mounted writable or as a directory.
func TestTheCheckHasTeeth(t *testing.T) {
	dir, file := corev1.HostPathDirectory, corev1.HostPathFile
	served := pkiDir + "/apiserver.crt"
	for _, tc := range []struct {
		name, host, pod string
		typ             *corev1.HostPathType
		readOnly        bool
	}{
		{"the directory", pkiDir, pkiDir, &dir, true},
		{"/etc/kubernetes", "/etc/kubernetes", "/host/etc/kubernetes", &dir, true},
		{"ca.key", pkiDir + "/ca.key", pkiDir + "/ca.key", &file, true},
		{"writable", served, served, &file, false},
		{"untyped", served, served, nil, true},
		{"elsewhere", served, "/pki/apiserver.crt", &file, true},
	} {
		c := corev1.Container{Name: "skewgate", Args: []string{"run", "--tls-cert-file=" + served},
			VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: tc.pod, ReadOnly: tc.readOnly}}}
		spec := corev1.PodSpec{Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tc.host, Type: tc.typ}}}}}
		if vs := violations(spec); len(vs) == 0 {
			t.Errorf("%s: no violation found", tc.name)
		}
	}
	c := corev1.Container{Name: "skewgate", Args: []string{"run", "--tls-cert-file=" + served}}
	if vs := violations(corev1.PodSpec{Containers: []corev1.Container{c}}); len(vs) == 0 {
		t.Errorf("a flag's file not mounted: no violation found")
	}
}

// documentedRow is a row of docs/deploy.md's table of host paths:
// "| `HOST` (hostPath TYPE[, ro]) | same or `POD` | why |".
var documentedRow = regexp.MustCompile("^\\| `([^`]+)` \\(hostPath (\\w+)(, ro)?\\) \\| (same|`[^`]+`) \\|")

// TestHostFilesDocumented: docs/deploy.md's table of what the pod gets from
// the host lists exactly the DaemonSet's hostPath mounts, with their types,
// read-only flags and paths in the pod; its table of host keys lists
// exactly the pki files mounted.
func TestHostFilesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	section := sectionOf(t, string(doc), "## What the pod gets from the host")
	var documented []hostMount
	for _, line := range strings.Split(section, "\n") {
		m := documentedRow.FindStringSubmatch(line)
		if m == nil {
			if strings.HasPrefix(line, "| `") {
				t.Errorf("docs/deploy.md: row %q is not \"| `HOST` (hostPath TYPE[, ro]) | same or `POD` | why |\"", line)
			}
			continue
		}
		pod := strings.Trim(m[4], "`")
		if pod == "same" {
			pod = m[1]
		}
		documented = append(documented, hostMount{host: m[1], typ: m[2], readOnly: m[3] != "", pod: pod})
	}
	spec := podSpecs(t)["base: DaemonSet skewgate"]
	mounted := hostMounts(spec, spec.Containers[0])
	less := func(a, b hostMount) int { return strings.Compare(a.host, b.host) }
	slices.SortFunc(documented, less)
	slices.SortFunc(mounted, less)
	if !slices.Equal(documented, mounted) {
		t.Errorf("docs/deploy.md documents the host paths\n%v\nthe DaemonSet mounts\n%v", documented, mounted)
	}

	keys := sectionOf(t, string(doc), "### Host keys the pod reads")
	var files []string
	for _, line := range strings.Split(keys, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, f := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
			files = append(files, path.Join(pkiDir, f[1]))
		}
	}
	var pki []string
	for _, m := range mounted {
		if within(m.host, pkiDir) {
			pki = append(pki, m.host)
		}
	}
	slices.Sort(files)
	if !slices.Equal(files, pki) {
		t.Errorf("docs/deploy.md's host keys table lists %v; the DaemonSet mounts %v", files, pki)
	}
}

// sectionOf is the text below heading up to the next heading.
func sectionOf(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading)
	if !ok {
		t.Fatalf("docs/deploy.md: no section %q", heading)
	}
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
