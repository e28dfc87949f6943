// main.go, beside its go.mod (which requires the client; Go 1.25 or later)
// DATABASE_URL=postgres://web:change-me@localhost/app go run .
package main

import (
	"log"
	"net/http"
	"os"

	ratelimit "github.com/ratelimit/ratelimit/clients/go"
)

func main() {
	rl, err := ratelimit.New(os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	nginx, _ := ratelimit.ParseTrustedProxies([]string{"127.0.0.1"}) // the address it saw is the client's
	address, failures, lockout := rl.Policy("sign_in_ip"), rl.Policy("sign_in_failures"), rl.Policy("sign_in_lockout")
	limiters := []*ratelimit.Limiter{address, failures, lockout}

	http.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		email := r.PostFormValue("email")
		if r.Method != http.MethodPost || email == "" {
			http.Error(w, "POST an e-mail address, please", http.StatusBadRequest)
			return
		}
		ip, _ := ratelimit.IPKey(ratelimit.RequestIP(r, nginx), 64)
		pair := email + " " + ip // the lockout's key: a stranger cannot lock the owner out
		// the three policies, all or nothing: 429 when any refuses
		d, err := rl.TakeAllPolicy(r.Context(), []ratelimit.Request{
			address.Request(ip, 1), failures.Request(email, 1), lockout.Request(pair, 1)})
		if err != nil { // a bad use or a revoked privilege, never an outage
			log.Print(err)
			http.Error(w, "Internal error", http.StatusInternalServerError)
			return
		}
		if !d.Allowed {
			limiters[d.Binding].SetHeaders(w.Header(), d)
			http.Error(w, "Too many attempts", http.StatusTooManyRequests)
			return
		}
		if r.PostFormValue("password") != "right" { // ... check the password
			http.Error(w, "Wrong e-mail address or password", http.StatusUnauthorized)
			return
		}
		// signed in: only failures count
		_, err = failures.Refund(r.Context(), email, 1)
		if err == nil {
			_, err = lockout.Refund(r.Context(), pair, 1)
		}
		if err != nil {
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
