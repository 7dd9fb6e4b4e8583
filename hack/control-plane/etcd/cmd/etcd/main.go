// etcd server built from go.etcd.io/etcd/server/v3 as a dependency (its own
// go.mod has replace directives, so `go install` of it fails).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
