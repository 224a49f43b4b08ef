package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

// viewFlags are what the commands that read topview's View (top, queue)
// share: how they reach Nomad, how far back the predictions learn, and
// where the controller's status is; one set, so that they read alike.
type viewFlags struct {
	nomadConn
	historyWindow       time.Duration
	controllerNamespace string
}

// addViewFlags defines the connection flags, -history-window and
// -controller-namespace; controllerUsage says what the command shows of
// the controller.
func (o *viewFlags) addViewFlags(fs *flag.FlagSet, namespaceUsage, controllerUsage string) {
	o.addFlags(fs, namespaceUsage)
	fs.DurationVar(&o.historyWindow, "history-window", 24*time.Hour, "how far back finished allocations are read to predict run times and waits; 0 reads none")
	fs.StringVar(&o.controllerNamespace, "controller-namespace", "default", controllerUsage)
}

// checkViewFlags says which of the shared flags has a value not allowed.
func (o *viewFlags) checkViewFlags() error {
	if o.historyWindow < 0 {
		return fmt.Errorf("-history-window %v: must not be negative", o.historyWindow)
	}
	return nil
}

// viewSource connects to Nomad as the options and environment say: a
// nomadview.Watcher (the APM's read model), the history the predictions
// learn from, the controller's status. The caller closes the watcher.
func (o *viewFlags) viewSource() (*topview.Source, error) {
	cfg := o.config()
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	w := nomadview.NewWatcher(cl, nomadview.Config{Namespace: cfg.Namespace, FinishedWindow: o.historyWindow})
	return &topview.Source{Client: cl, Watcher: w, History: o.historyWindow > 0, ControllerNamespace: o.controllerNamespace}, nil
}
