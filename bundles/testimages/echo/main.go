// Command echo is a bundle test image: a tiny HTTP server on :8080 that
// answers every request with "echo".
package main

import (
	"log"
	"net/http"
	"time"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("echo\n"))
	})
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("echo listening on %s", srv.Addr)
	log.Fatal(srv.ListenAndServe())
}
