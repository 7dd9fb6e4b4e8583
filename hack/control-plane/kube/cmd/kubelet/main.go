// kubelet built from the k8s.io/kubernetes module (see ../../../build.sh): same shape as upstream
// cmd/kubelet. It runs the local cluster's one real node (hack/cluster.sh, docs/local-control-plane.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() { os.Exit(cli.Run(app.NewKubeletCommand())) }
