// main.go: apt-get install golang-go golang-github-lib-pq-dev, then
// DATABASE_URL='postgres://web@localhost/app?sslmode=disable' GO111MODULE=off GOPATH=/usr/share/gocode go run main.go
// (with modules instead: go mod init app && go get github.com/lib/pq && go run .)
package main

import (
	"context"
	"database/sql"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/lib/pq"
)

var db *sql.DB

// signInLimit allows 5 sign-in attempts per minute per client address, burst 5.
func signInLimit(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		peer, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, "bad peer address", http.StatusInternalServerError)
			return
		}
		var xff sql.NullString
		if lines := r.Header.Values("X-Forwarded-For"); len(lines) > 0 {
			xff = sql.NullString{String: strings.Join(lines, ", "), Valid: true}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var allowed bool
		var retryAfter float64
		err = db.QueryRowContext(ctx,
			`SELECT allowed, retry_after FROM rl_take('auth_login',
			        rl_ip_key(rl_client_ip($1::inet, $2)), 5.0/60, 5)`,
			peer, xff).Scan(&allowed, &retryAfter)
		if err != nil {
			log.Printf("rate limit: %v", err) // fail closed: no decision, no sign-in
			w.Header().Set("Retry-After", "5")
			http.Error(w, "Try again later", http.StatusServiceUnavailable)
			return
		}
		if !allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter))))
			http.Error(w, "Too many attempts", http.StatusTooManyRequests)
			return
		}
		next(w, r)
	}
}

func login(w http.ResponseWriter, r *http.Request) {
	// ... check the password
	w.Write([]byte("checked\n"))
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
	http.HandleFunc("/login", signInLimit(login))
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
