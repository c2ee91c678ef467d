package upgrade

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// manifestEvents follows the directory holding path, as the kubelet
// follows its static-pod directory (inotify), and signals each change of
// path's entry: a new manifest is read the moment the kubelet sees it,
// not at the next poll. kubeadm renames its new manifest into place, so
// the directory, not the file, is watched (a watch on the file would stay
// on the replaced inode). nil when the directory cannot be watched: the
// poll alone then reads the manifest, and that is logged.
func manifestEvents(ctx context.Context, path string, log *slog.Logger) <-chan struct{} {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("kube-apiserver manifest not watched; read every poll only", "err", err)
		return nil
	}
	dir, base := filepath.Dir(path), filepath.Base(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		log.Warn("kube-apiserver manifest's directory not watched; read every poll only", "dir", dir, "err", err)
		return nil
	}
	out := make(chan struct{}, 1)
	context.AfterFunc(ctx, func() { w.Close() })
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) != base {
					continue
				}
				select {
				case out <- struct{}{}:
				default: // a read is due already
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflow loses events, not the manifest: the poll
				// still reads it.
				log.Warn("kube-apiserver manifest watch", "err", err)
			}
		}
	}()
	return out
}
