package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/cisbench"
)

func cisBenchmarkCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cis-benchmark",
		Short: "Check this node against the CIS Kubernetes Benchmark (control plane, etcd, worker node)",
		Long: "Reads this node's files and the command lines of its running kube-apiserver, controller manager, scheduler, etcd, " +
			"kubelet and kube-proxy, and checks each against the benchmark's control-plane, etcd and worker-node sections " +
			"(docs/security.md lists every check). Prints a table, or the report as JSON; exits 1 when a check fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := cisbench.Run(cmd.Context(), host.Real())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(r)
			} else {
				err = r.Write(os.Stdout)
			}
			if err != nil {
				return err
			}
			if n := r.Count(cisbench.Fail); n > 0 {
				return fmt.Errorf("%d of the benchmark's checks failed", n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
