// Command service is a tiny local "ticket system" for the http example: it
// stores each POSTed ticket under the request's Idempotency-Key (a retry
// with the same key does not create a second ticket) and answers
// GET /tickets/{key} so keep can reconcile an uncertain write.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	flag.Parse()
	var mu sync.Mutex
	tickets := map[string]json.RawMessage{}
	order := []string{}
	http.HandleFunc("/tickets", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet {
			list := []json.RawMessage{}
			for _, k := range order {
				list = append(list, tickets[k])
			}
			_ = json.NewEncoder(w).Encode(list)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key header required", http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if _, ok := tickets[key]; !ok {
			t, _ := json.Marshal(map[string]any{"key": key, "number": len(order) + 1, "ticket": json.RawMessage(body)})
			tickets[key] = t
			order = append(order, key)
			log.Printf("created ticket %d", len(order))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(tickets[key])
	})
	http.HandleFunc("/tickets/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		t, ok := tickets[strings.TrimPrefix(r.URL.Path, "/tickets/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(t)
	})
	// Bind first, then say where: a taken port is an error, never a false "on".
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ticket service on http://%s\n", l.Addr())
	log.Fatal(http.Serve(l, nil))
}
