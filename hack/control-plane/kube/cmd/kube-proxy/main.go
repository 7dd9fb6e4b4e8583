// kube-proxy built from the k8s.io/kubernetes module (see ../../../build.sh): same shape as upstream
// cmd/kube-proxy. Services (ClusterIP, NodePort) for the real node's pods, in iptables mode.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() { os.Exit(cli.Run(app.NewProxyCommand())) }
