package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/skewgate/skewgate/deploy/image"
)

// imageBinDir is where a control-plane image keeps its binary: kubeadm's
// static pods run it by name (command: [kube-apiserver, …]), so it must be
// on the image's PATH.
const imageBinDir = "/usr/local/bin"

// kubeadmImageSources are the binaries, by image repository name, the lab
// builds kubeadm's images from: etcd at the version the tag names (kubeadm
// picks it: the lab sets no etcd imageTag). CoreDNS and kube-proxy are not here: the
// lab skips those addons (KubeadmSkipPhases).
func kubeadmImageSources(bins Binaries, kb KubeadmBinaries, tag string) (name, bin string, ok bool) {
	switch {
	case strings.HasPrefix(tag, "kube-apiserver:"):
		return "kube-apiserver", bins.APIServers[versionOf(tag)], true
	case strings.HasPrefix(tag, "kube-controller-manager:"):
		return "kube-controller-manager", kb.ControllerManager[versionOf(tag)], true
	case strings.HasPrefix(tag, "kube-scheduler:"):
		return "kube-scheduler", kb.Scheduler[versionOf(tag)], true
	case strings.HasPrefix(tag, "etcd:"):
		return "etcd", bins.Etcd[etcdVersionOfTag(versionOf(tag))], true
	}
	return "", "", false
}

func versionOf(repoTag string) string { _, v, _ := strings.Cut(repoTag, ":"); return v }

// listKubeadmImages is `kubeadm config images list --config cfg`: the
// images that kubeadm version needs for that configuration.
func listKubeadmImages(ctx context.Context, kubeadm, cfg string) ([]string, error) {
	out, err := exec.CommandContext(ctx, kubeadm, "config", "images", "list", "--config", cfg).Output()
	if err != nil {
		return nil, fmt.Errorf("kubeadm config images list: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// buildKubeadmImage writes the image ref (e.g.
// registry.k8s.io/kube-apiserver:v1.36.3) of bin to an archive in the
// cache, unless the archive there is newer than bin.
func buildKubeadmImage(cacheDir, ref, cmd, bin string) (string, error) {
	out := filepath.Join(cacheDir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if a, err := os.Stat(out); err == nil {
		if b, err := os.Stat(bin); err == nil && a.ModTime().After(b.ModTime()) {
			return out, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	libs, err := sharedLibraries(bin)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	s := image.Spec{
		Binary: bin, Entrypoint: filepath.Join(imageBinDir, cmd), Version: tag.TagStr(),
		Created: time.Unix(0, 0).UTC(), Env: []string{"PATH=" + imageBinDir + ":/usr/bin:/bin"}, Files: libs,
	}
	img, err := image.Build(s)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	if err := image.WriteArchive(img, ref, s.Created, out); err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return out, nil
}

// sharedLibraries are the loader and libraries ldd says bin needs, at the
// paths it names them by. The lab builds Kubernetes with cgo where the
// host has a C compiler (upstream's release builds are static), so an
// image on no base needs the host's libc beside the binary.
func sharedLibraries(bin string) ([]image.File, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if strings.Contains(string(out), "not a dynamic executable") || strings.Contains(string(out), "statically linked") {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w\n%s", bin, err, out)
	}
	return parseLdd(string(out)), nil
}

// parseLdd reads ldd's "name => /path (addr)" and "/loader (addr)" lines.
func parseLdd(out string) []image.File {
	var files []image.File
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			p = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			p = f[0]
		default:
			continue // linux-vdso.so.1: the kernel's
		}
		files = append(files, image.File{Path: p, Source: p})
	}
	return files
}
