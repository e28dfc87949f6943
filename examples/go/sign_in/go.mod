module sign_in

go 1.25.0

require github.com/ratelimit/ratelimit/clients/go v1.3.0

// a checkout of ratelimit; without this line, go get fetches the client
replace github.com/ratelimit/ratelimit/clients/go => ../../../clients/go
