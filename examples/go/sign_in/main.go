// main.go: apt-get install -y golang-go golang-github-jackc-pgx-v4-dev
// mkdir -p ~/go/src && ln -s /path/to/ratelimit/clients/go ~/go/src/ratelimit
// DATABASE_URL=postgres://web:change-me@localhost/app GO111MODULE=off GOPATH=$HOME/go:/usr/share/gocode go run main.go
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	"ratelimit"
)

func main() {
	rl, err := ratelimit.Connect(context.Background(), os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	nginx, _ := ratelimit.ParseTrustedProxies([]string{"127.0.0.1"}) // the address it saw is the client's
	address, failures := rl.Policy("sign_in_ip"), rl.Policy("sign_in_failures")

	http.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		email := r.PostFormValue("email")
		if r.Method != http.MethodPost || email == "" {
			http.Error(w, "POST an e-mail address, please", http.StatusBadRequest)
			return
		}
		ip, _ := ratelimit.IPKey(ratelimit.RequestIP(r, nginx), 64)
		// both policies, all or nothing: 429 when either refuses
		d, err := rl.TakeAllPolicy(r.Context(), []ratelimit.Request{address.Request(ip, 1), failures.Request(email, 1)})
		if err != nil { // a bad use or a revoked privilege, never an outage
			log.Print(err)
			http.Error(w, "Internal error", http.StatusInternalServerError)
			return
		}
		if !d.Allowed {
			[]*ratelimit.Limiter{address, failures}[d.Binding].SetHeaders(w.Header(), d)
			http.Error(w, "Too many attempts", http.StatusTooManyRequests)
			return
		}
		if r.PostFormValue("password") != "right" { // ... check the password
			http.Error(w, "Wrong e-mail address or password", http.StatusUnauthorized)
			return
		}
		if _, err := failures.Refund(r.Context(), email, 1); err != nil { // signed in: only failures count
			log.Print(err)
			http.Error(w, "Internal error", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("Signed in\n"))
	})
	port := os.Getenv("PORT")
	if port == "" {
		port = "3000"
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
