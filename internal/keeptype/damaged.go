package keeptype

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Damaged storage (issue 44): keep.db's rows can change without SQLite
// noticing (a bit flip inside a row passes its integrity check). What keep
// executes or trusts — a version's script, a grant, a workflow's policy and
// files root, a secret's scopes and hosts, a repair's script — is written
// with a digest (StoredDigest) and checked against it whenever it is read;
// keep's own JSON that no longer decodes is damaged the same way. Either
// is ClassDamaged, never a bug in the script: the message names the table
// and row and what the person can do, and keep changes nothing of it.

// ClassDamaged is a row of keep's own store that does not match the digest
// written with it, or keep's stored JSON that does not decode.
const ClassDamaged ErrorClass = "damaged"

// DamagedWords begin every damaged-storage message: how the card, the
// status and the CLI name it.
const DamagedWords = "damaged storage"

// RestoreBackup is the restore step that always applies.
const RestoreBackup = "restore keep.db from a backup"

// StoredDigest is the SHA-256 (hex) of a row's checked fields, each
// length-prefixed so that no two lists of fields give the same bytes.
func StoredDigest(fields ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Damage says which stored thing is damaged and how to restore it.
type Damage struct {
	What    string // "the script of workflow hook version 1.0"
	Table   string // "versions"
	Row     string // "hook@1"
	Why     string // "does not match the digest written with it"
	Restore string // what the person can do besides RestoreBackup ("" = only that)
}

// Damaged is the error of a damaged stored row: ClassDamaged, its words
// saying what, where and what to do.
func Damaged(d Damage) *Error {
	todo := RestoreBackup
	if d.Restore != "" {
		todo = d.Restore + ", or " + RestoreBackup
	}
	return Errorf(ClassDamaged, "%s: %s (table %s, row %s) %s — keep's store was changed outside keep or is damaged, not the script; keep did not use it and changed nothing of it. To restore: %s",
		DamagedWords, d.What, d.Table, d.Row, d.Why, todo)
}

// CheckDigest is the check made whenever a checked row is read: nil when
// stored (the digest written with the row) is the digest of fields, else
// d as a Damaged error.
func CheckDigest(stored string, d Damage, fields ...string) error {
	if stored == StoredDigest(fields...) {
		return nil
	}
	if d.Why == "" {
		d.Why = "does not match the digest written with it"
	}
	return Damaged(d)
}

// UndecodableJSON is keep's own stored JSON that does not decode: damaged
// storage of table/row, with why.
func UndecodableJSON(what, table, row string, err error) *Error {
	return Damaged(Damage{What: what, Table: table, Row: row, Why: fmt.Sprintf("does not decode (%v)", err)})
}

// IsDamaged reports whether err is damaged storage.
func IsDamaged(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Class == ClassDamaged
}

// IsDamagedMessage reports whether a stored error message (a run's, a
// workflow's paused reason) says damaged storage.
func IsDamagedMessage(msg string) bool { return strings.Contains(msg, DamagedWords+": ") }

// RestoreScript is what a person does for a damaged script: deploy it
// again from its file.
func RestoreScript(file string) string {
	return "redeploy the script: keep deploy " + file
}

// RestoreGrant is what a person does for a damaged grant: take it back
// and grant again what the workflow needs.
func RestoreGrant(workflow, item string) string {
	return fmt.Sprintf("revoke it and grant again: keep grant %s --revoke '%s', then keep grant %s", workflow, item, workflow)
}

// StatusWordDamaged is a workflow's status (keep status, the API, the
// page) while something of it that keep executes or trusts is damaged
// storage; its reason is the Damaged message.
const StatusWordDamaged = "damaged"

// DamagedNote is the card's note on a run that stopped on, or holds,
// damaged storage: what it is, what it is not, and the way back.
func DamagedNote(workflow string) string {
	return "This is " + DamagedWords + ", not a bug in the script: change nothing in the script. Restore what the reason names (" + RestoreBackup +
		"), then resume the workflow if it was paused (keep resume " + workflow + ") and try again."
}
