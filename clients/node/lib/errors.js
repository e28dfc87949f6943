'use strict';
// The error of bad use: an argument the server refuses, or an error a retry
// cannot fix.  Its own module, so that every part of the client can throw it
// without requiring the client.

class RateLimitUsageError extends Error {
  // cause: the server's error (pg's DatabaseError), when the server refused
  constructor(message, code, limiter, index, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'RateLimitUsageError';
    this.code = code;	// the server's SQLSTATE
    this.limiter = limiter;
    if (index !== undefined) this.index = index;
  }
}

module.exports = { RateLimitUsageError };
