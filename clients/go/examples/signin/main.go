// A sign-in form that counts failed attempts only: at most 5 a minute per
// account and 20 a minute per client address, shared by every instance of
// the application through PostgreSQL (DATABASE_URL), decided in memory at
// the same limits if the database stalls or fails.
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	"ratelimit"
)

var passwords = map[string]string{"grace@example.com": "correct horse"} // your user store

func main() {
	rl, err := ratelimit.Connect(context.Background(), os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	account := rl.Limiter("signin_account", 5.0/60, 5)
	address := rl.Limiter("signin_address", 20.0/60, 20)

	http.HandleFunc("/signin", func(w http.ResponseWriter, r *http.Request) {
		email := r.PostFormValue("email")
		ip, _ := ratelimit.IPKey(ratelimit.RequestIP(r, nil), 64) // behind a proxy: its TrustedProxies
		d, err := rl.TakeAll(r.Context(), []ratelimit.Request{account.Request(email, 1), address.Request(ip, 1)})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // bad use, never an outage
			return
		}
		if !d.Allowed {
			[]*ratelimit.Limiter{account, address}[d.Binding].SetHeaders(w.Header(), d)
			http.Error(w, "too many attempts", http.StatusTooManyRequests)
			return
		}
		if want, ok := passwords[email]; !ok || r.PostFormValue("password") != want {
			http.Error(w, "wrong e-mail or password", http.StatusUnauthorized)
			return
		}
		account.Refund(r.Context(), email, 1) // a success does not count
		address.Refund(r.Context(), ip, 1)
		w.Write([]byte("welcome\n"))
	})
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	log.Fatal(http.ListenAndServe(addr, nil))
}
