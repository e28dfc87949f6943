// signin.go: DATABASE_URL='postgres://web@localhost/app?sslmode=disable' GO111MODULE=off GOPATH=/usr/share/gocode go run signin.go
package main

import (
	"database/sql"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/lib/pq"
)

var db *sql.DB

func login(w http.ResponseWriter, r *http.Request) {
	peer, _, _ := net.SplitHostPort(r.RemoteAddr)
	var xff sql.NullString
	if lines := r.Header.Values("X-Forwarded-For"); len(lines) > 0 {
		xff = sql.NullString{String: strings.Join(lines, ", "), Valid: true}
	}
	email := r.PostFormValue("email")
	// before the password check: the client address and the account, all or nothing
	var allowed bool
	var retryAfter float64
	err := db.QueryRowContext(r.Context(),
		`SELECT allowed, retry_after FROM rl_take_all(ARRAY['sign_in_ip', 'sign_in_failures'],
		        ARRAY[rl_ip_key(rl_client_ip($1::inet, $2)), $3])`,
		peer, xff, email).Scan(&allowed, &retryAfter)
	if err == nil && !allowed {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter))))
		http.Error(w, "Too many attempts", http.StatusTooManyRequests)
		return
	}
	if err == nil && r.PostFormValue("password") != "right" { // ... check the password
		http.Error(w, "Wrong e-mail address or password", http.StatusUnauthorized)
		return
	}
	if err == nil {
		// signed in: only failures count against the account
		_, err = db.ExecContext(r.Context(), "SELECT rl_refund('sign_in_failures', $1)", email)
	}
	if err != nil {
		log.Printf("rate limit: %v", err) // fail closed
		w.Header().Set("Retry-After", "5")
		http.Error(w, "Try again later", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("Signed in\n"))
}

func main() {
	connector, err := pq.NewConnector(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	db = sql.OpenDB(connector)
	port := os.Getenv("PORT")
	if port == "" {
		port = "3000"
	}
	http.HandleFunc("/login", login)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
