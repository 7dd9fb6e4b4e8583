// kubectl built from the k8s.io/kubectl staging module at the control plane's own release (see
// ../build.sh): the tests use this client, never whatever kubectl the machine happens to have.
// Same shape as upstream cmd/kubectl.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
