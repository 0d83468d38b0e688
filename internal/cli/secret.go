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
		Use:   "secret set NAME [--host HOST]... | scope NAME --host HOST... | list | rm NAME",
		Short: "keep credentials in keep, not in scripts: a script names one as {secret:NAME} in a call's headers",
		Long: "keep secret set NAME reads the value from standard input (one line; a trailing newline is dropped) and\n" +
			"stores it encrypted like the accounts' tokens (the key is secret.key in the data directory, or\n" +
			"KEEP_SECRET_KEY). A script names it in a header, e.g. \"Authorization\": \"Bearer {secret:NAME}\": keep\n" +
			"fills it in at the call, the script never sees it, and the value is masked wherever keep shows text.\n" +
			"A call sends a secret only to the hosts it is scoped to (--host api.crm.example, repeatable; keep\n" +
			"secret scope changes them without the value) and only for a workflow granted it (keep grant WF\n" +
			"'secret:NAME'). A secret without hosts goes nowhere (a webhook's verify needs none).\n" +
			"keep secret list shows names, hosts and when they were set, never values; keep secret rm NAME forgets one.",
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
				fmt.Fprintln(w, "NAME\tHOSTS\tSET")
				for _, r := range rows {
					hosts := strings.Join(r.Hosts, ", ")
					if hosts == "" {
						hosts = "(none: goes nowhere)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, hosts, r.SetAt)
				}
				return w.Flush()
			})
		},
	}
	a.addJSON(list)
	rm := a.secretRmCmd()
	c.AddCommand(set, a.secretScopeCmd(), list, rm)
	return c
}

// secretSetCmd is keep secret set NAME: the value from standard input, stored sealed.
func (a *app) secretSetCmd() *cobra.Command {
	var hosts []string
	c := &cobra.Command{
		Use:   "set NAME [--host HOST]...",
		Short: "store a secret read from standard input (echo -n … | keep secret set NAME --host api.example.com)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := kt.CheckSecretName(args[0]); err != nil {
				return err
			}
			for _, h := range hosts {
				if err := kt.CheckSecretHost(h); err != nil {
					return fmt.Errorf("--host %w; nothing was stored", err)
				}
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
			if cmd.Flags().Changed("host") {
				err = s.SetScoped(cmd.Context(), args[0], value, hosts)
			} else {
				err = s.Set(cmd.Context(), args[0], value)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "secret %s set (%d characters, stored encrypted); a call's headers name it as {secret:%s}, a webhook's verify as secret: %q\n", args[0], len(value), args[0], args[0])
			return a.printSecretHosts(cmd, args[0])
		},
	}
	c.Flags().StringArrayVar(&hosts, "host", nil, "a host a call may send the secret to (api.crm.example, 127.0.0.1:8090), repeatable; without it the secret keeps the hosts it had (a new one: none)")
	return c
}

// secretScopeCmd is keep secret scope NAME --host HOST...: the hosts a
// secret may go to, without its value.
func (a *app) secretScopeCmd() *cobra.Command {
	var hosts []string
	var none bool
	c := &cobra.Command{
		Use:   "scope NAME --host HOST... | --none",
		Short: "set the hosts a call may send a secret to, exactly these (its value stays)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(hosts) == 0 && !none {
				return fmt.Errorf("name the hosts %s may go to (--host api.crm.example, repeatable), or --none for nowhere; nothing was changed", args[0])
			}
			if len(hosts) > 0 && none {
				return fmt.Errorf("--host and --none say opposite things; nothing was changed")
			}
			d := a.direct(false)
			defer d.Close()
			s, err := d.Secrets()
			if err != nil {
				return err
			}
			err = s.Scope(cmd.Context(), args[0], hosts)
			if errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("no secret named %s (keep secret list shows them; keep secret set %s --host HOST stores one)", args[0], args[0])
			}
			if err != nil {
				return err
			}
			if err := a.printSecretHosts(cmd, args[0]); err != nil {
				return err
			}
			fmt.Fprintln(a.out, "a run that waits for it goes on with Try again on its card (keep resolve RUN --try-again)")
			return nil
		},
	}
	c.Flags().StringArrayVar(&hosts, "host", nil, "a host a call may send the secret to (api.crm.example, 127.0.0.1:8090), repeatable")
	c.Flags().BoolVar(&none, "none", false, "the secret goes nowhere (a webhook's verify still reads it)")
	return c
}

// printSecretHosts says where a secret may go now.
func (a *app) printSecretHosts(cmd *cobra.Command, name string) error {
	d := a.direct(false)
	defer d.Close()
	s, err := d.Secrets()
	if err != nil {
		return err
	}
	list, err := s.List(cmd.Context())
	if err != nil {
		return err
	}
	for _, x := range list {
		if x.Name != name {
			continue
		}
		if len(x.Hosts) == 0 {
			fmt.Fprintf(a.out, "%s goes to no host: a call that sends it waits for you; scope it with keep secret scope %s --host HOST\n", name, name)
		} else {
			fmt.Fprintf(a.out, "%s may go to %s, for a workflow granted it (keep grant WF 'secret:%s')\n", name, strings.Join(x.Hosts, ", "), name)
		}
	}
	return nil
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
