// A net/http server for tests: every answer chunked (flushed in three pieces, no
// Content-Length), with a folded-free head as Go writes it and the router's config hash
// header. It prints its address on the first line of stdout, then serves until killed.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(listener.Addr().String())
	padding := strings.Repeat("x", 5000) // beyond net/http's buffer: it goes chunked
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Vsr-Config-Hash", strings.Repeat("c", 64))
		flusher := w.(http.Flusher)
		fmt.Fprint(w, `{"decision_result": {"decision_name": "go"}, `)
		flusher.Flush()
		fmt.Fprintf(w, `"padding": "%s"`, padding)
		flusher.Flush()
		fmt.Fprint(w, "}")
	})
	http.Serve(listener, nil)
}
