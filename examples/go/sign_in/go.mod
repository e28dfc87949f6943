module sign_in

go 1.25.0

require github.com/ratelimit/ratelimit/clients/go v1.3.0

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.9.2 // indirect
	golang.org/x/text v0.29.0 // indirect
)

// a checkout of ratelimit; without this line, go get fetches the client
replace github.com/ratelimit/ratelimit/clients/go => ../../../clients/go
