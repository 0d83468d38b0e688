package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	kt "github.com/keep-run/keep/internal/keeptype"
)

func (a *app) secretCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "secret set NAME | list | rm NAME",
		Short: "keep credentials in keep, not in scripts: a script names one as {secret:NAME} in a call's headers",
		Long: "keep secret set NAME reads the value from standard input (one line; a trailing newline is dropped) and\n" +
			"stores it encrypted like the accounts' tokens (the key is secret.key in the data directory, or\n" +
			"KEEP_SECRET_KEY). A script names it in a header, e.g. \"Authorization\": \"Bearer {secret:NAME}\": keep\n" +
			"fills it in at the call, the script never sees it, and the value is masked wherever keep shows text.\n" +
			"keep secret list shows names and when they were set, never values; keep secret rm NAME forgets one.",
	}
	set := a.secretSetCmd()
	list := &cobra.Command{
		Use:   "list",
		Short: "list the secrets' names and when each was set (never their values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.read(cmd.Context(), func(k *keepAPI) error {
				rows, err := k.Secrets(cmd.Context())
				if err != nil {
					return err
				}
				rows = nonNil(rows)
				if a.jsonOut {
					return a.printJSON(rows)
				}
				if len(rows) == 0 {
					fmt.Fprintln(a.out, "no secrets (keep secret set NAME)")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "NAME\tSET")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\n", r.Name, r.SetAt)
				}
				return w.Flush()
			})
		},
	}
	a.addJSON(list)
	rm := a.secretRmCmd()
	c.AddCommand(set, list, rm)
	return c
}

// secretSetCmd is keep secret set NAME: the value from standard input, stored sealed.
func (a *app) secretSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME",
		Short: "store a secret read from standard input (echo -n … | keep secret set NAME)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := kt.CheckSecretName(args[0]); err != nil {
				return err
			}
			value, err := readSecretValue(cmd.InOrStdin())
			if err != nil {
				return err
			}
			d := a.direct(true)
			defer d.Close()
			s, err := d.Secrets()
			if err != nil {
				return err
			}
			if err := s.Set(cmd.Context(), args[0], value); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "secret %s set (%d characters, stored encrypted); a call's headers name it as {secret:%s}, a webhook's verify as secret: %q\n", args[0], len(value), args[0], args[0])
			return nil
		},
	}
}

// secretRmCmd is keep secret rm NAME.
func (a *app) secretRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "forget a secret (calls that name it then wait for a person)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := a.direct(false)
			defer d.Close()
			s, err := d.Secrets()
			if err != nil {
				return err
			}
			err = s.Remove(cmd.Context(), args[0])
			if errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("no secret named %s (keep secret list shows them)", args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "secret %s removed\n", args[0])
			return nil
		},
	}
}

// readSecretValue reads one value from standard input: everything up to
// the end, without the trailing newline a terminal or echo adds.
func readSecretValue(in io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(in), 64<<10+1))
	if err != nil {
		return "", err
	}
	if len(b) > 64<<10 {
		return "", errors.New("the secret is longer than 64 KiB; nothing was stored")
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", errors.New("no value on standard input; give it there, e.g. `printf %s \"$TOKEN\" | keep secret set NAME`; nothing was stored")
	}
	return v, nil
}
