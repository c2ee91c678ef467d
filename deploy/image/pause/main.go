// Command pause is the lab's pod sandbox process: it holds a pod's
// namespaces and waits to be told to stop. The lab builds it into its pause
// image (containerd's sandbox_image), because no registry is reachable.
//
// Like the upstream pause, `pause -v` prints a version and exits 0:
// `kubeadm upgrade apply` checks that the cluster can run a pod with a Job
// of the pause image and that argument.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (skewgate lab)")
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
