// A kube-scheduler with one out-of-tree plugin of kubeherd's own, KubeherdNodeLabel.
//
// kubeherd judges a configuration for a custom scheduler image by running that image's
// kube-scheduler on it (operator/kubeherd/scheduler/judge.py). The real-node tests build this
// program into such an image to show it: a configuration with valid args for the plugin rolls
// out and schedules with it, one with invalid args is refused in kube-scheduler's own words.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(Name, New))
	os.Exit(cli.Run(command))
}
