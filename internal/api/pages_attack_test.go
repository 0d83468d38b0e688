package api_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// TestHostilePagingIsRefusedNeverAnError (issue 44, attack): forged
// cursors, limits and searches on every paged list, on SQLite and on
// PostgreSQL: each is answered 200 (a search that finds nothing) or 400
// saying what to send — never a 500, and the lists still answer after.
func TestHostilePagingIsRefusedNeverAnError(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			storeURL := ""
			if backend == "postgres" {
				storeURL = pgtest.FreshSchema(t)
			}
			r := newRigOn(t, "", false, storeURL)
			r.deploy(ordersScript, "orders.js")
			r.postOrder("1", 1)
			r.settle()
			forge := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
			queries := []string{
				"cursor=" + forge("o1.\xff\xfe"), "cursor=" + forge("n1.a\x00b"), "cursor=" + forge("o-9223372036854775808.x"),
				"cursor=" + forge("o9223372036854775807.x"), "cursor=" + forge("o99999999999999999999.x"), "cursor=" + forge("x1.x"),
				"cursor=" + strings.Repeat("A", 100000), "cursor=%ff%fe", "cursor=" + forge("o1.") + "&cursor=zz",
				"limit=-1", "limit=1e3", "limit=99999999999999999999", "limit=%00", "limit=+5",
				"q=%00", "q=%ff%fe", "q=" + url.QueryEscape(`%_\'"`), "q=" + url.QueryEscape("' OR 1=1 --"), "q=" + strings.Repeat("%25", 20000),
			}
			for _, q := range []string{"topic=%00", "status=%ff", "topic=" + url.QueryEscape("order.placed' OR '1'='1")} {
				if code, _, links, _ := r.get("/api/v1/workflows/orders/events?" + q); code != http.StatusOK && code != http.StatusBadRequest {
					t.Errorf("events?%s: %d %.300s, want 200 or 400", q, code, links["error"])
				}
			}
			for _, list := range []string{"inputs", "outputs", "runs", "items"} {
				for _, q := range queries {
					code, _, links, _ := r.get("/api/v1/workflows/orders/" + list + "?" + q)
					if code != http.StatusOK && code != http.StatusBadRequest {
						t.Errorf("%s?%.60s: %d %.300s, want 200 or 400", list, q, code, links["error"])
					}
					if code == http.StatusBadRequest && !strings.Contains(links["error"], "bad_request") {
						t.Errorf("%s?%.60s: 400 %.300s, want bad_request saying what to send", list, q, links["error"])
					}
				}
				for _, path := range []string{"/api/v1/workflows/ord%00ers/" + list, "/api/v1/workflows/ord%ffers/" + list} {
					if code, _, links, _ := r.get(path); code != http.StatusBadRequest || !strings.Contains(links["error"], "is not text") {
						t.Errorf("%s: %d %.300s, want 400 saying it is not text", path, code, links["error"])
					}
				}
				if code, rows, _, _ := r.get("/api/v1/workflows/orders/" + list); code != 200 || len(rows) == 0 {
					t.Errorf("%s after the hostile reads: %d, %d rows", list, code, len(rows))
				}
			}
		})
	}
}
