package ratelimit

import (
	"errors"
	"fmt"
)

// The kinds of bad use, for errors.Is: a retry cannot fix any of them, so
// they are errors, never a decision, and never start a fallback.
var (
	// ErrBadArgument: an argument rl_take refuses (SQLSTATE class 22).
	ErrBadArgument = errors.New("bad argument")
	// ErrUnknownLimiter: the database has no policy for the limiter (42704).
	ErrUnknownLimiter = errors.New("unknown limiter")
	// ErrNotPermitted: the explicit form for a limiter that has a policy,
	// or a call the role may not make (42501).
	ErrNotPermitted = errors.New("not permitted")
)

// Error is the error of a call the client or the database refused.
type Error struct {
	Limiter string // the limiter of the request at fault
	Index   int    // in a multi-limit call, the request at fault
	Code    string // the SQLSTATE the server answers such a call with
	Message string // names the argument, as the server's message does
	kind    error
	cause   error // the server's *pgconn.PgError; nil for a check the client made
}

func (e *Error) Error() string {
	return fmt.Sprintf("ratelimit: limiter %q: %s (SQLSTATE %s)", e.Limiter, e.Message, e.Code)
}

// Unwrap answers ErrBadArgument, ErrUnknownLimiter or ErrNotPermitted, and
// the server's *pgconn.PgError when the server refused the call, so that
// errors.Is and errors.As find either.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func badArgument(code, message string) *Error {
	return &Error{Code: code, Message: message, kind: ErrBadArgument}
}

// refusal is the error for a bad-use SQLSTATE, or nil for any other.
func refusal(code, message string) *Error {
	switch {
	case code == "42704":
		return &Error{Code: code, Message: message, kind: ErrUnknownLimiter}
	case code == "42501":
		return &Error{Code: code, Message: message, kind: ErrNotPermitted}
	case len(code) == 5 && code[:2] == "22":
		return &Error{Code: code, Message: message, kind: ErrBadArgument}
	}
	return nil
}
