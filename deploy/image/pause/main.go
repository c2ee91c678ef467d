// Command pause is the lab's pod sandbox process: it holds a pod's
// namespaces and waits to be told to stop. The lab builds it into its pause
// image (containerd's sandbox_image), because no registry is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
