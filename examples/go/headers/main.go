// headers.go: apt-get install golang-go golang-github-lib-pq-dev, then
// DATABASE_URL='postgres://web@localhost/app?sslmode=disable' GO111MODULE=off GOPATH=/usr/share/gocode go run headers.go
package main

import (
	"database/sql"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	_ "github.com/lib/pq"
)

var db *sql.DB

func api(w http.ResponseWriter, r *http.Request) {
	peer, _, _ := net.SplitHostPort(r.RemoteAddr)
	var xff sql.NullString
	if lines := r.Header.Values("X-Forwarded-For"); len(lines) > 0 {
		xff = sql.NullString{String: strings.Join(lines, ", "), Valid: true}
	}
	var allowed bool
	var raw []byte
	var headers map[string]string
	err := db.QueryRowContext(r.Context(),
		`SELECT d.allowed, rl_headers(d, 'api') FROM rl_take('api',
		        rl_ip_key(rl_client_ip($1::inet, $2))) AS d`, peer, xff).Scan(&allowed, &raw)
	if err == nil {
		err = json.Unmarshal(raw, &headers)
	}
	if err != nil {
		log.Printf("rate limit: %v", err) // fail closed
		w.Header().Set("Retry-After", "5")
		http.Error(w, "Try again later", http.StatusServiceUnavailable)
		return
	}
	for name, value := range headers {
		w.Header().Set(name, value)
	}
	if !allowed {
		http.Error(w, "Too many requests", http.StatusTooManyRequests)
		return
	}
	w.Write([]byte("ok\n"))
}

func main() {
	var err error
	if db, err = sql.Open("postgres", os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "3000"
	}
	http.HandleFunc("/api", api)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
