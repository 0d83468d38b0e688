package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Secrets belong to someone (issue 38 #4). A secret a script names in a
// call ({secret:NAME} in http.request's headers or URL) is sent only when
//
//   - a person granted it to the workflow (the grant "secret:NAME", seen
//     like a connector's in keep grant, deploy's "not yet granted" and the
//     card), and
//   - the request goes to one of the hosts the secret is scoped to (keep
//     secret set NAME --host HOST, or keep secret scope): the host of the
//     request as it is sent, not as the script describes it.
//
// A secret a connector's declaration in keep.toml names (a custom
// connector's headers) is the person's who wrote keep.toml: the grant of
// the connector's method covers it, and its hosts are checked all the
// same. The check is made when the connector fills the value in, so a
// refused call has sent nothing; the run waits with a card that names
// exactly what to do.

// secretsNamed are the secrets the script's own arguments of a call name
// (any string in them, nested or not); partial says some string starts a
// {secret: that names none whole, which a connector's filling may complete
// (a probe's {idempotencyKey} inside one): then every secret the call
// opens counts as the script's.
func secretsNamed(args map[string]any) (names map[string]bool, partial bool) {
	names = map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			ns, p := kt.SecretsIn(x)
			for _, n := range ns {
				names[n] = true
			}
			partial = partial || p
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(args)
	return names, partial
}

// secrets opens the secrets a call with the script's arguments args names
// (connector.FillSecrets) once checkSecret lets them go where the request
// goes.
func (x *runExec) secrets(args map[string]any) connector.SecretFunc {
	if x.e.secret == nil {
		return nil
	}
	named, partial := secretsNamed(args)
	return func(name, host string) (string, error) {
		if err := x.checkSecret(name, host, named[name] || partial); err != nil {
			return "", err
		}
		return x.e.secret(x.ctx, name)
	}
}

// checkSecret refuses to send the secret name to host unless the secret is
// scoped to host and, when the script named it (byScript), the workflow
// was granted it. The refusal names every step a person takes; the grant,
// when one is missing, ends it (kt.GrantSuffix), so the card's Grant
// grants exactly it.
func (x *runExec) checkSecret(name, host string, byScript bool) error {
	var sec kt.Secret
	err := x.e.store.View(x.ctx, func(tx store.Tx) error {
		var err error
		sec, err = tx.SecretGet(name)
		return err
	})
	if errors.Is(err, kt.ErrNotFound) {
		if host == "" {
			return err // FillSecrets says keep secret set NAME
		}
		return kt.Errorf(kt.ClassPermission, "the call sends {secret:%s} to %s, and keep has no secret of that name%s --host %s", name, host, kt.SecretSuffix(name), host)
	}
	if kt.IsDamaged(err) {
		return err // its hosts are damaged storage: said as such, never sent (issue 44)
	}
	if err != nil {
		return kt.Errorf(kt.ClassInternal, "read the secret %s: %v", name, err)
	}
	granted := true
	if byScript {
		if granted, err = x.granted(kt.SecretGrant(name)); err != nil {
			return err
		}
	}
	scoped := host != "" && slices.Contains(sec.Hosts, host)
	if granted && scoped {
		return nil
	}
	var why []string
	switch {
	case host == "":
		why = append(why, "the request's host cannot be read, and a secret goes only to a host it is scoped to")
	case !scoped && len(sec.Hosts) == 0:
		why = append(why, fmt.Sprintf("the secret may go to no host yet: if %s is where it belongs, scope it: keep secret scope %s --host %s, then Try again", host, name, host))
	case !scoped:
		why = append(why, fmt.Sprintf("the secret may go only to %s: if %s is where it belongs too, scope it: keep secret scope %s --host %s, then Try again", strings.Join(sec.Hosts, ", "), host, name, strings.Join(append(slices.Clone(sec.Hosts), host), " --host ")))
	}
	msg := fmt.Sprintf("the call sends {secret:%s} to %s, and nothing was sent: ", name, orNone(host))
	if !granted {
		item := kt.SecretGrant(name)
		why = append(why, fmt.Sprintf("the secret is not granted to %s: a person allows which secrets a workflow sends (%s)%s", x.wf.Name, item, kt.GrantSuffix(x.wf.Name, item)))
	}
	return kt.Errorf(kt.ClassPermission, "%s%s", msg, strings.Join(why, "; "))
}

func orNone(host string) string {
	if host == "" {
		return "a host keep cannot read"
	}
	return host
}
