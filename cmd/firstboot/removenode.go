package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
)

func removeNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove-node NAME",
		Short: "Forget a node that is gone for good: its etcd member and its Node (on a control plane)",
		Long: `Removes the etcd member of a lost control plane NAME and deletes its Node, so
that a new machine booted with NAME's config disk joins in its place. A member
that still answers is not removed (power the machine off first), nor one whose
removal the remaining members could not commit (etcd lost its quorum: restore
from a backup instead). For a lost worker only its Node is deleted. See
docs/operations/runbook.md, "A control plane is lost".`,
		Example: `  sudo firstboot remove-node cp-2`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := firstboot.Defaults(slog.New(slog.NewTextHandler(os.Stderr, nil)))
			o.Console = os.Stderr
			res, err := firstboot.RemoveNode(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			fmt.Println(res)
			return nil
		},
	}
}
