package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/registry"
)

// newTrashReindexCommand is `registry trash reindex <config>`: after Redis
// lost the trash index (a flush, a failover to an empty replica), write
// it again from the holds in storage. It walks the whole blob store, like
// `gc sweep`; it is safe while the registry serves.
func newTrashReindexCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reindex <config>",
		Short: "Write the trash's Redis index again from the holds in storage (after Redis lost it)",
		Long: "Walks the blob store (its cost grows with the blobs, like gc sweep) and indexes every\n" +
			"trash hold it finds, so that list, restore by run or plan, purge and the 404 lookup\n" +
			"see them again. Safe while the registry serves: indexing an entry twice changes nothing.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conf, err := readConfig(args[0])
			if err != nil {
				return err
			}
			srv, err := registry.New(cmd.Context(), conf)
			if err != nil {
				return err
			}
			defer srv.Close()
			bin := srv.Trash()
			if bin == nil {
				return fmt.Errorf("trash reindex: the trash is off (trash.keep is 0 in %s)", args[0])
			}
			rep, err := bin.Reindex(cmd.Context())
			for _, u := range rep.Unreadable {
				fmt.Fprintf(cmd.ErrOrStderr(), "trash reindex: unreadable, its holds not indexed (they keep their data): %s\n", u)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "trash reindex: %d blobs walked, %d entries indexed, %d unreadable\n", rep.Blobs, rep.Entries, len(rep.Unreadable))
			if err == nil && len(rep.Unreadable) > 0 {
				err = fmt.Errorf("trash reindex: %d places could not be read", len(rep.Unreadable))
			}
			return err
		},
	}
}
