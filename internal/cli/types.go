package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/inproc"
	"github.com/spf13/cobra"
)

// typesCmd writes keep.d.ts: the script API as TypeScript declarations,
// from the connectors a registry has (keep's own and those keep.toml
// declares) and the table of what each phase's ctx may call.
func (a *app) typesCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "types",
		Short: "write keep.d.ts: the script API's types (Keep.*, ctx per phase, every connector method), for an editor or tsc over a script with // @ts-check",
		Long: "Writes keep.d.ts (or -o FILE; -o - prints it) with the types of Keep.workflow, Keep.consumer, Keep.task, PrepareResult, " +
			"ctx in each phase (a call a phase may not make is a type error) and every connector method, keep.toml's custom connectors included. " +
			"Put `// @ts-check` and `/// <reference path=\"./keep.d.ts\" />` at the top of a script.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			text := inproc.Types(cfg)
			if out == "-" {
				fmt.Fprint(a.out, text)
				return nil
			}
			if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
				return fmt.Errorf("write the types: %w", err)
			}
			// The reference is the path from a script in this folder.
			ref := filepath.ToSlash(out)
			if !filepath.IsAbs(out) && !strings.HasPrefix(ref, ".") {
				ref = "./" + ref
			}
			fmt.Fprintf(a.out, "wrote %s (%d bytes); put `// @ts-check` and `/// <reference path=\"%s\" />` at the top of a script in this folder\n", out, len(text), ref)
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "keep.d.ts", "the file to write; - prints the declarations")
	return c
}
