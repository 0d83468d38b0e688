package connector

import (
	"net/http"
	"strconv"
	"time"
)

// RetryAfter is the wait a service's Retry-After header asks for (seconds
// or an HTTP date); 0 when it gives none.
func RetryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && time.Until(t) > 0 {
		return time.Until(t)
	}
	return 0
}
